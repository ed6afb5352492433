"""The offline search with a fake evaluator: structure first, then parameters; failures steer away."""

from __future__ import annotations

import json

from aka.agent.search import Structure, Trial, key, propose, value_weights

FAST = Structure("fast", {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3]}, {"a": 1, "b": 1}, ("a + b <= 7",))
SLOW = Structure("slow", {"a": [1, 2, 3, 4, 5]}, {"a": 3})


def fake_eval(structure: str, cfg: dict) -> float | None:
    """'fast' peaks at a=4, b=2; a == 5 always crashes; 'slow' is mediocre."""
    if cfg["a"] == 5:
        return None
    if structure == "slow":
        return 0.5
    return 2.0 - abs(cfg["a"] - 4) * 0.3 - abs(cfg.get("b", 2) - 2) * 0.2


def drive(n: int, seed: int = 0) -> list[Trial]:
    trials: list[Trial] = []
    for _ in range(n):
        p = propose([FAST, SLOW], trials, seed)
        if p is None:
            break
        score = fake_eval(p.structure.name, p.config)
        trials.append(Trial(p.structure.name, p.config, score, "" if score is not None else "compile"))
    return trials


def test_structure_first_then_parameters():
    trials = drive(3)
    assert [t.structure for t in trials[:2]] == ["fast", "slow"]
    assert trials[0].config == FAST.start and trials[1].config == SLOW.start
    assert trials[2].structure == "fast"  # halving: the better structure gets the parameter budget


def test_finds_the_optimum_and_never_repeats_or_breaks_constraints():
    trials = drive(14)
    assert max(t.score or 0 for t in trials) == 2.0
    keys = [key(t.structure, t.config) for t in trials]
    assert len(keys) == len(set(keys))
    assert all(FAST.valid(t.config) for t in trials if t.structure == "fast")


def test_failures_steer_away():
    fails = [Trial("fast", {"a": 5, "b": b}, None, "gate") for b in (1, 2)]
    w = value_weights(fails + [Trial("fast", {"a": 3, "b": 1}, 1.0)])
    assert w[("a", "5")] < 0.2 < w[("a", "3")]
    trials = drive(14)
    crashes = [t for t in trials if t.score is None]
    assert len(crashes) <= 3  # once a=5 failed it is rarely proposed again


def test_deterministic_given_history():
    a, b = drive(10, seed=3), drive(10, seed=3)
    assert json.dumps([t.config for t in a]) == json.dumps([t.config for t in b])


def test_exhausts_cleanly():
    tiny = Structure("tiny", {"a": [1, 2]}, {"a": 1})
    trials = []
    for _ in range(5):
        p = propose([tiny], trials)
        if p is None:
            break
        trials.append(Trial("tiny", p.config, 1.0))
    assert len(trials) == 2 and propose([tiny], trials) is None
