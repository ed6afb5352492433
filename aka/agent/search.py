"""Offline search over pattern structures and their parameters: pure, deterministic, replayable.

Structure first: every structure (a pattern with its structural choices fixed) gets one trial at
its starting point; then successive halving keeps the better half of the structures alive, and
finally the best one. Parameters second: an evolutionary step mutates one or two parameters of a
good parent, preferring neighbouring values. Failures steer: a (parameter, value) pair seen in
failed trials loses weight, and a structure whose trials all failed gets no more.

All state is derived from the list of finished trials, so a resumed run proposes exactly what
the killed one would have (the RNG is seeded from the seed and the number of trials).
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Structure:
    name: str
    space: dict[str, list[Any]]  # tunable parameters -> allowed values, in a meaningful order
    start: dict[str, Any]  # a complete, valid configuration to begin from
    constraints: tuple[str, ...] = ()  # python expressions over the config that must hold

    def valid(self, config: dict[str, Any]) -> bool:
        env = {"__builtins__": {"min": min, "max": max, "abs": abs}}
        return all(bool(eval(c, env, dict(config))) for c in self.constraints)


@dataclass
class Trial:
    structure: str
    config: dict[str, Any]
    score: float | None  # higher is better; None when the trial failed
    failed: str = ""  # stage that failed (check, compile, gate), empty on success


@dataclass
class Proposal:
    structure: Structure
    config: dict[str, Any]
    phase: str  # "structure" or "parameters"
    rationale: str
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # key -> (parent value, new value)
    avoided: list[str] = field(default_factory=list)


def key(structure: str, config: dict[str, Any]) -> str:
    return structure + ":" + json.dumps(config, sort_keys=True, default=str)


def propose(structures: list[Structure], trials: list[Trial], seed: int = 0,
            pending: list[Trial] = ()) -> Proposal | None:
    """The next configuration to evaluate, or None when the space is exhausted.

    `pending` are proposals still being measured (the loop prepares one candidate ahead): they
    count as seen, so the two in flight always differ.
    """
    rng = random.Random(f"{seed}:{len(trials)}:{len(pending)}")
    seen = {key(t.structure, t.config) for t in [*trials, *pending]}
    by_name = {s.name: [t for t in trials if t.structure == s.name] for s in structures}
    for s in structures:  # structure phase, in the planner's order of preference
        if not by_name[s.name] and key(s.name, s.start) not in seen:  # pending ones are in `seen`
            return Proposal(s, dict(s.start), "structure", f"first look at structure '{s.name}'")
    for s in alive(structures, by_name, len(trials)):
        prop = _mutate(s, by_name[s.name], trials, seen, rng)
        if prop is not None:
            return prop
    for s in structures:  # alive ones exhausted: anything unseen anywhere
        prop = _mutate(s, by_name[s.name], trials, seen, rng)
        if prop is not None:
            return prop
    return None


def alive(structures: list[Structure], by_name: dict[str, list[Trial]], n_trials: int) -> list[Structure]:
    """Successive halving over structures: keep ceil(S / 2^rung) best, rung grows with trials spent."""
    scored = [(best(by_name[s.name]), i, s) for i, s in enumerate(structures)]
    working = [x for x in scored if x[0] is not None]
    if not working:  # everything failed so far: keep trying all, least-tried first
        return sorted(structures, key=lambda s: len(by_name[s.name]))
    working.sort(key=lambda x: (-x[0], x[1]))
    rung = max(0, int(math.log2(max(1, n_trials / max(1, len(structures))))))
    keep = max(1, math.ceil(len(working) / 2**rung))
    kept = [s for _, _, s in working[:keep]]
    return sorted(kept, key=lambda s: len(by_name[s.name]))  # least-tried alive structure first


def best(trials: list[Trial]) -> float | None:
    scores = [t.score for t in trials if t.score is not None]
    return max(scores) if scores else None


def value_weights(trials: list[Trial]) -> dict[tuple[str, str], float]:
    """Weight per (param, value): failures push it down, successes bring it back."""
    fail: Counter = Counter()
    ok: Counter = Counter()
    for t in trials:
        for k, v in t.config.items():
            (ok if t.score is not None else fail)[(k, repr(v))] += 1
    return {kv: (1 + ok[kv]) / (1 + ok[kv] + 3 * fail[kv]) for kv in set(fail) | set(ok)}


def _mutate(s: Structure, mine: list[Trial], every: list[Trial], seen: set[str], rng: random.Random):
    good = sorted((t for t in mine if t.score is not None), key=lambda t: -t.score)
    parent = rng.choice(good[:3]).config if good else s.start
    weights = value_weights(every)
    tunable = [k for k, vals in s.space.items() if len(vals) > 1]
    if not tunable:
        return None
    for _ in range(200):
        cfg = dict(parent)
        changed = {}
        for k in rng.sample(tunable, min(len(tunable), rng.choice((1, 1, 2)))):
            new = _pick(k, s.space[k], cfg.get(k), weights, rng)
            if new != cfg.get(k):
                changed[k] = (cfg.get(k), new)
                cfg[k] = new
        if changed and key(s.name, cfg) not in seen and s.valid(cfg):
            avoided = sorted(f"{k}={v}" for (k, v), w in weights.items() if w < 0.5 and k in s.space)
            what = ", ".join(f"{k} {a}->{b}" for k, (a, b) in changed.items())
            base = f"best of '{s.name}' ({good[0].score:.3f})" if good else f"start of '{s.name}'"
            return Proposal(s, cfg, "parameters", f"mutate {base}: {what}", changed, avoided)
    return None


def _pick(k: str, values: list[Any], current: Any, weights: dict, rng: random.Random) -> Any:
    """A neighbouring value most of the time (small steps), any value sometimes; failures weigh less."""
    idx = values.index(current) if current in values else rng.randrange(len(values))
    near = [values[i] for i in (idx - 1, idx + 1) if 0 <= i < len(values)]
    pool = near if near and rng.random() < 0.7 else [v for v in values if v != current] or values
    w = [weights.get((k, repr(v)), 1.0) for v in pool]
    return rng.choices(pool, weights=w, k=1)[0]
