"""Offline search over pattern structures and their parameters: pure, deterministic, replayable.

Structure first: every structure (a pattern with its structural choices fixed) gets one trial at
its starting point; then successive halving keeps the better half of the structures alive, and
finally the best one. Parameters second: an evolutionary step mutates one or two parameters of a
good parent, preferring neighbouring values. Failures and losses steer: a (parameter, value) pair
seen in failed trials loses weight, so does one whose every measured trial stayed below LOSS of the
run's best score, and a structure whose trials all failed gets no more. A low weight makes a move
rarely proposed, never forbidden: a structure with no other move left yields to the next one, and
only when none has one is the best-weighted of those moves taken. A structure STUCK of whose
candidates were refused for the same shape (faster overall, slower there beyond the margin) leaves
the alive set: its knobs have not reached that shape, so the budget goes to the other structures
first.

What earlier runs measured against the same incumbent (issue 36: aka.knowledge.measured, the caller
keeps only the entries that apply: same device model, timing, incumbent and template code) comes in
as `known`. Every known measurement is a trial like the run's own (seen: never re-measured; scored:
it takes part in the halving and the value weights). A known loss (ratio <= LOSS) also restricts:
a structure all of whose known measurements lost, and none of whose trials did not, gets no first
look and no mutation; a configuration holding every (key, value) change of a known loss is not
proposed, unless a trial of its structure that did not lose holds those changes too and the
configuration keeps every value by which that trial differs from the loss (the more specific
measurement speaks, for its own setting only). Only when nothing else is left does the search take a restricted
move, and its rationale says so. The restriction is a filter in front of the same search, so
without known losses every proposal is what it was before.

Measurements against code this incumbent did not come from through recorded promotions (its code
was edited by hand) do not apply, but first looks that lost against every one of several earlier
kernels still say something about the structure: on the H200 (2026-12-07) a gdn_prefill run spent
its first candidate on single_pass's first look, 0.506x, after it had measured 0.73x and 0.614x
against two earlier incumbents. Such a structure comes in `deferred` (the caller decides which:
aka.knowledge.measured.deferred, its stale first looks on this device model and timing span two or
more incumbents and all lost) and is restricted like a banned one, unless a measurement that
applies (`known`) or a trial of this run did not lose. Its stale parameter measurements restrict
nothing: they are too specific to code that changed.

All state is derived from the list of finished trials and the known measurements, so a resumed run
proposes exactly what the killed one would have (the RNG is seeded from the seed and the number of
trials), as long as the knowledge it is handed is the same.
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
    blocked_by: str = ""  # the shape whose paired slowdown refused it although faster overall


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


@dataclass(frozen=True)
class Known:
    """A measurement an earlier run recorded against this incumbent (aka.knowledge.measured)."""

    structure: str
    config: dict[str, Any]
    changes: dict[str, Any]  # the (key, new value) pairs it changed relative to the incumbent's config
    ratio: float  # its speed / the incumbent's (>1 faster)
    failed: str = ""  # a stage it failed after being timed
    blocked_by: str = ""
    note: str = ""  # one line saying what, where and when ("known: single_pass 0.82x vs ...")

    @property
    def lost(self) -> bool:
        return not self.failed and self.ratio <= LOSS

    def trial(self, incumbent_score: float) -> Trial:
        """As one of the run's trials: scored on the run's scale (the incumbent's score times the ratio)."""
        return Trial(self.structure, dict(self.config), None if self.failed else incumbent_score * self.ratio,
                     self.failed, self.blocked_by)


@dataclass(frozen=True)
class Deferred:
    """A structure whose first look lost against every one of several earlier kernels, none of which
    this incumbent replaced through recorded promotions (aka.knowledge.measured.deferred)."""

    structure: str
    ratios: tuple[float, ...]  # those first looks' speed / their incumbent's, slowest first
    note: str = ""  # one line for the plan's `avoided` list: where and when they were measured

    def what(self) -> str:
        """'single_pass 0.61x, 0.73x against earlier code'."""
        return f"{self.structure} {', '.join(f'{r:.2f}x' for r in self.ratios)} against earlier code"


def propose(structures: list[Structure], trials: list[Trial], seed: int = 0,
            pending: list[Trial] = (), known: list[Known] = (), incumbent_score: float = 1.0,
            deferred: list[Deferred] = ()) -> Proposal | None:
    """The next configuration to evaluate, or None when the space is exhausted.

    `pending` are proposals still being measured (the loop prepares one candidate ahead): they
    count as seen, so the two in flight always differ. `known` are earlier runs' measurements that
    apply here (module docstring); `incumbent_score` puts their ratios on the trials' scale.
    `deferred` are structures whose first looks lost against earlier code (module docstring).
    """
    trials = [*(k.trial(incumbent_score) for k in known), *trials]
    rng = random.Random(f"{seed}:{len(trials)}:{len(pending)}")
    seen = {key(t.structure, t.config) for t in [*trials, *pending]}
    by_name = {s.name: [t for t in trials if t.structure == s.name] for s in structures}
    rules = _Rules(known, trials, incumbent_score, deferred)
    if not rules:
        return _search(structures, trials, by_name, seen, rng, None)
    prop = _search([s for s in structures if not rules.excluded(s.name)], trials, by_name, seen, rng, rules)
    if prop is not None:
        skipped = rules.skipped(structures, by_name)
        if skipped:
            prop.rationale += f" [skipped, measured slower here before: {'; '.join(skipped)}]"
        prop.avoided += rules.notes()
        return prop
    prop = _search(structures, trials, by_name, seen, rng, None)  # nothing else left
    if prop is not None:
        why = rules.reason(prop.structure.name, prop.config)
        if why is not None:
            prop.rationale = f"nothing else left, so despite {why}: {prop.rationale}"
    return prop


def _search(structures: list[Structure], trials: list[Trial], by_name: dict[str, list[Trial]], seen: set[str],
            rng: random.Random, rules: _Rules | None) -> Proposal | None:
    """The search proper over `structures`; with `rules`, only moves they allow."""
    allowed = rules.allows if rules is not None else None
    for s in structures:  # structure phase, in the planner's order of preference
        if not by_name[s.name] and key(s.name, s.start) not in seen:  # pending ones are in `seen`
            if allowed is None or allowed(s.name, s.start):
                return Proposal(s, dict(s.start), "structure", f"first look at structure '{s.name}'")
    # alive structures first, then anything unseen anywhere; a move that failed or lost before is
    # taken only when no structure has another one left
    weights = value_weights(trials)
    left = {s.name: shape for s in structures if (shape := stuck(by_name[s.name]))}
    for settle in (False, True):
        for group in (alive(structures, by_name, len(trials)), structures):
            for s in group:
                prop = _mutate(s, by_name[s.name], weights, seen, rng, settle, allowed)
                if prop is not None:
                    others = [f"left '{n}': {shape} refused {STUCK}+ of its candidates"
                              for n, shape in left.items() if n != s.name]
                    if others:
                        prop.rationale += f" ({'; '.join(others)})"
                    return prop
    return None


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _holds(config: dict[str, Any], changes: dict[str, Any]) -> bool:
    return all(k in config and _canon(config[k]) == _canon(v) for k, v in changes.items())


class _Rules:
    """What the known losses and the deferred structures forbid (module docstring); falsy when there is
    none."""

    def __init__(self, known: list[Known], trials: list[Trial], incumbent_score: float,
                 deferred: list[Deferred] = ()):
        self.losers = [k for k in known if k.lost]
        good = [t for t in trials if t.score is not None and t.score > LOSS * incumbent_score]
        self.good: dict[str, list[dict[str, Any]]] = {}
        for t in good:
            self.good.setdefault(t.structure, []).append(t.config)
        # every known measurement of the structure lost (one that did not is a good trial) and none of
        # its trials in this run did better: no first look, no mutation
        self.banned: dict[str, Known] = {}
        for k in sorted(self.losers, key=lambda k: k.ratio):
            if k.structure not in self.good:
                self.banned.setdefault(k.structure, k)
        self.sets = [k for k in self.losers if k.changes]
        # first looks that lost against earlier code only: anything measured against this incumbent
        # (known, or this run's trials) that did not lose speaks louder, and a known loss already bans
        self.deferred: dict[str, Deferred] = {}
        for d in deferred:
            if d.structure not in self.good and d.structure not in self.banned:
                self.deferred.setdefault(d.structure, d)

    def __bool__(self) -> bool:
        return bool(self.losers) or bool(self.deferred)

    def excluded(self, name: str) -> bool:
        """No first look and no mutation of this structure while anything else is left."""
        return name in self.banned or name in self.deferred

    def _cleared(self, name: str, loser: Known, config: dict[str, Any]) -> bool:
        """A trial of this structure that did not lose holds the loser's changes, and `config` keeps what
        that trial set beside them: in that setting the changes are not what lost. Only there: on the H200
        (2026-12-05) cp_target_programs 1024 lost alone (0.887x) and not beside cp_min_seg_chunks 16 and
        BVC 64 (0.97x), so it stays forbidden beside cp_min_seg_chunks 16 with BVC 32."""
        for good in self.good.get(name, ()):
            if _holds(good, loser.changes):
                beside = {k: v for k, v in good.items() if _canon(loser.config.get(k)) != _canon(v)}
                if _holds(config, beside):
                    return True
        return False

    def blocker(self, name: str, config: dict[str, Any]) -> Known | None:
        """The known loss that forbids this configuration, or None."""
        if name in self.banned:
            return self.banned[name]
        for k in self.sets:
            if _holds(config, k.changes) and not self._cleared(name, k, config):
                return k
        return None

    def allows(self, name: str, config: dict[str, Any]) -> bool:
        return name not in self.deferred and self.blocker(name, config) is None

    def reason(self, name: str, config: dict[str, Any]) -> str | None:
        """What forbids this configuration, in words, or None."""
        k = self.blocker(name, config)
        if k is not None:
            return k.note
        if name in self.deferred:
            return f"first looks measured slower before: {self.deferred[name].what()}"
        return None

    def skipped(self, structures: list[Structure], by_name: dict[str, list[Trial]]) -> list[str]:
        """Structures whose first look the known losses took away, with the measurement that did."""
        out = []
        for s in structures:
            if s.name in self.banned:
                k = self.banned[s.name]
                out.append(f"{s.name} {k.ratio:.2f}x")
            elif s.name in self.deferred:
                out.append(self.deferred[s.name].what())
            elif not by_name[s.name] and (k := self.blocker(s.name, s.start)) is not None:
                out.append(f"{s.name} (holds {k.structure}'s losing change "
                           f"{', '.join(f'{a}={b}' for a, b in k.changes.items())}, {k.ratio:.2f}x)")
        return out

    def notes(self, limit: int = 12) -> list[str]:
        lines = [k.note or f"known: {k.structure} {k.ratio:.2f}x" for k in sorted(self.losers, key=lambda k: k.ratio)]
        lines = list(dict.fromkeys(lines))
        stale = [d.note or f"deferred: {d.what()}" for d in self.deferred.values()]
        return (lines[:limit] + ([f"... and {len(lines) - limit} more known losses"] if len(lines) > limit else [])
                + stale)


# Candidates of one structure refused for the same shape before the structure leaves the alive set.
# On the H200 (2026-12-03) a 21-candidate fa4_decode run spent 16 candidates on split_waves, the best
# structure by geomean (1.08x); 8 were refused for D6-q1, the ragged batch, whose loss comes from
# how the structure sizes its splits, which none of its knobs changes.
STUCK = 3


def stuck(mine: list[Trial]) -> str:
    """The shape that refused STUCK or more of these trials, or ''."""
    counts = Counter(t.blocked_by for t in mine if t.blocked_by)
    if not counts:
        return ""
    shape, n = counts.most_common(1)[0]
    return shape if n >= STUCK else ""


def alive(structures: list[Structure], by_name: dict[str, list[Trial]], n_trials: int) -> list[Structure]:
    """Successive halving over structures: keep ceil(S / 2^rung) best, rung grows with trials spent.
    Stuck structures (one shape keeps refusing them) are left out while any other remains."""
    free = [s for s in structures if not stuck(by_name[s.name])] or structures
    scored = [(best(by_name[s.name]), i, s) for i, s in enumerate(free)]
    working = [x for x in scored if x[0] is not None]
    if not working:  # everything failed so far: keep trying all, least-tried first
        return sorted(free, key=lambda s: len(by_name[s.name]))
    working.sort(key=lambda x: (-x[0], x[1]))
    rung = max(0, int(math.log2(max(1, n_trials / max(1, len(structures))))))
    keep = max(1, math.ceil(len(working) / 2**rung))
    kept = [s for _, _, s in working[:keep]]
    return sorted(kept, key=lambda s: len(by_name[s.name]))  # least-tried alive structure first


def best(trials: list[Trial]) -> float | None:
    scores = [t.score for t in trials if t.score is not None]
    return max(scores) if scores else None


# A value none of whose trials came within this fraction of the run's best is a losing move. On the
# H200 (2026-12-03) a 22-candidate fa4_prefill run spent 9 candidates on BLOCK_M 64, BLOCK_N 32 and
# SPLIT_CAUSAL off in new combinations after each had already lost 20-50% earlier in the run.
LOSS = 0.9
LOSS_WEIGHT = 0.2
AVOID = 0.5  # a value weighing less is avoided: proposed only when no structure has another move


def value_weights(trials: list[Trial]) -> dict[tuple[str, str], float]:
    """Weight per (param, value): failures push it down, successes bring it back; a value whose best
    trial is below LOSS of the best trial overall weighs LOSS_WEIGHT as much."""
    fail: Counter = Counter()
    ok: Counter = Counter()
    best_of: dict[tuple[str, str], float] = {}
    for t in trials:
        for k, v in t.config.items():
            kv = (k, repr(v))
            (ok if t.score is not None else fail)[kv] += 1
            if t.score is not None:
                best_of[kv] = max(best_of.get(kv, t.score), t.score)
    top = best(trials)
    w = {kv: (1 + ok[kv]) / (1 + ok[kv] + 3 * fail[kv]) for kv in set(fail) | set(ok)}
    if top is not None and top > 0:
        for kv, b in best_of.items():
            if b < LOSS * top:
                w[kv] *= LOSS_WEIGHT
    return w


def _mutate(s: Structure, mine: list[Trial], weights: dict[tuple[str, str], float], seen: set[str],
            rng: random.Random, settle: bool = True, allowed=None):
    good = sorted((t for t in mine if t.score is not None), key=lambda t: -t.score)
    # parents among the structure's three best, leaving out losers (below LOSS of its best)
    strong = [t for t in good[:3] if t.score >= LOSS * good[0].score]
    parent = rng.choice(strong).config if good else s.start
    tunable = [k for k, vals in s.space.items() if len(vals) > 1]
    if not tunable:
        return None
    fallback: tuple[float, dict, dict] | None = None  # the best-weighted move, if all are turned down
    for _ in range(200):
        cfg = dict(parent)
        changed = {}
        for k in rng.sample(tunable, min(len(tunable), rng.choice((1, 1, 2)))):
            new = _pick(k, s.space[k], cfg.get(k), weights, rng)
            if new != cfg.get(k):
                changed[k] = (cfg.get(k), new)
                cfg[k] = new
        if changed and key(s.name, cfg) not in seen and s.valid(cfg) and (allowed is None or allowed(s.name, cfg)):
            # _pick's weights only choose among a value's neighbours; a lone neighbour that failed or
            # lost would always be taken, so the move as a whole is accepted with its weight
            ws = [weights.get((k, repr(b)), 1.0) for k, (_, b) in changed.items()]
            if not settle:  # first pass: only moves to values never avoided (failed or lost)
                if min(ws) >= AVOID:
                    return _proposal(s, cfg, changed, good, weights)
                continue
            p = math.prod(ws)
            if rng.random() < p:
                return _proposal(s, cfg, changed, good, weights)
            if fallback is None or p > fallback[0]:
                fallback = (p, cfg, changed)
    return _proposal(s, fallback[1], fallback[2], good, weights) if fallback and settle else None


def _proposal(s: Structure, cfg: dict[str, Any], changed: dict, good: list[Trial], weights: dict) -> Proposal:
    avoided = sorted(f"{k}={v}" for (k, v), w in weights.items() if w < AVOID and k in s.space)
    what = ", ".join(f"{k} {a}->{b}" for k, (a, b) in changed.items())
    base = f"best of '{s.name}' ({good[0].score:.3f})" if good else f"start of '{s.name}'"
    return Proposal(s, cfg, "parameters", f"mutate {base}: {what}", changed, avoided)


def _pick(k: str, values: list[Any], current: Any, weights: dict, rng: random.Random) -> Any:
    """A neighbouring value most of the time (small steps), any value sometimes; failures weigh less."""
    idx = values.index(current) if current in values else rng.randrange(len(values))
    near = [values[i] for i in (idx - 1, idx + 1) if 0 <= i < len(values)]
    pool = near if near and rng.random() < 0.7 else [v for v in values if v != current] or values
    w = [weights.get((k, repr(v)), 1.0) for v in pool]
    return rng.choices(pool, weights=w, k=1)[0]
