"""The offline search with a fake evaluator: structure first, then parameters; failures steer away."""

from __future__ import annotations

import json
from collections import Counter

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


def test_losing_values_steer_away():
    """A value whose every trial stayed well below the run's best is rarely proposed again (the
    2026-12-03 fa4_prefill run re-tried BLOCK_M 64 three times after it had lost 42%)."""
    s = Structure("s", {"bm": [64, 128], "bn": [32, 64, 128]}, {"bm": 128, "bn": 64})
    trials = [Trial("s", {"bm": 128, "bn": 64}, 1.0), Trial("s", {"bm": 64, "bn": 64}, 0.58),
              Trial("s", {"bm": 128, "bn": 128}, 0.97)]
    w = value_weights(trials)
    assert w[("bm", "64")] < 0.5 <= w[("bm", "128")] and w[("bn", "128")] >= 0.5  # 0.97 is within LOSS
    picked = Counter()
    for seed in range(60):
        p = propose([s], trials, seed)
        picked[(p.config["bm"], p.config["bn"])] += 1
        assert "bm=64" in p.avoided
    # unseen: (128, 32) avoids the loser; (64, 32) and (64, 128) repeat it. Without the loss weight
    # 46 of these 60 proposals repeated bm 64 and (128, 32) was the least proposed.
    assert picked[(128, 32)] == max(picked.values())
    assert picked[(64, 32)] + picked[(64, 128)] <= 30


def test_only_losing_moves_left_are_still_proposed():
    """Low weights never end the search early: with every unseen move a loser, one is still taken."""
    s3 = Structure("s3", {"bm": [64, 128], "bn": [32, 64]}, {"bm": 128, "bn": 64})
    trials = [Trial("s3", {"bm": 128, "bn": 64}, 1.0), Trial("s3", {"bm": 64, "bn": 64}, 0.5),
              Trial("s3", {"bm": 128, "bn": 32}, 0.5)]
    p = propose([s3], trials, 0)
    assert p is not None and p.config == {"bm": 64, "bn": 32}  # the last unseen point, both values losers


def test_a_structure_one_shape_keeps_refusing_leaves_the_alive_set():
    """Faster overall but refused for the same shape STUCK times: the other structure gets the budget
    (the 2026-12-03 fa4_decode run spent 16 of 21 candidates on split_waves, 8 refused for D6-q1)."""
    from aka.agent.search import STUCK

    waves = Structure("waves", {"st": [1, 2, 3, 4], "bn": [16, 32, 64]}, {"st": 2, "bn": 32})
    target = Structure("target", {"st": [1, 2, 3, 4], "bn": [16, 32, 64]}, {"st": 2, "bn": 64})
    base = [Trial("waves", {"st": 2, "bn": 32}, 1.08, blocked_by="D6-q1"),
            Trial("target", {"st": 2, "bn": 64}, 1.0),
            Trial("waves", {"st": 1, "bn": 32}, 1.05, blocked_by="D6-q1"),
            Trial("target", {"st": 3, "bn": 64}, 0.98)]
    assert STUCK == 3
    # two refusals are not yet a pattern, nor are refusals on different shapes: halving keeps the faster
    for trials in (base, [*base, Trial("waves", {"st": 3, "bn": 32}, 1.07, blocked_by="D2-q1")]):
        assert {propose([waves, target], trials, seed).structure.name for seed in range(10)} == {"waves"}
    stuck = [*base, Trial("waves", {"st": 3, "bn": 32}, 1.07, blocked_by="D6-q1")]
    for seed in range(10):
        p = propose([waves, target], stuck, seed)
        assert p.structure.name == "target"
        assert "left 'waves': D6-q1 refused" in p.rationale


def test_when_every_structure_is_stuck_the_search_goes_on():
    only = Structure("only", {"st": [1, 2, 3]}, {"st": 1})
    trials = [Trial("only", {"st": s}, 1.05, blocked_by="D6") for s in (1, 2)]
    trials.append(Trial("only", {"st": 3}, 1.04, blocked_by="D6"))
    assert propose([only], trials) is None  # exhausted, not stopped early: every point was seen
    two = Structure("two", {"st": [1, 2, 3, 4]}, {"st": 1})
    p = propose([two], [Trial("two", {"st": s}, 1.05, blocked_by="D6") for s in (1, 2, 3)])
    assert p is not None and p.config == {"st": 4}


# -- what earlier runs measured (issue 36) ----------------------------------------------------------

from aka.agent.search import Known  # noqa: E402

REF = Structure("ref", {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3]}, {"kind": "ref", "a": 1, "b": 1})
ALT = Structure("alt", {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3]}, {"kind": "alt", "a": 1, "b": 1})
INCUMBENT = Trial("ref", REF.start, 1.0)  # the incumbent is the start of 'ref'
ALT_LOST = Known("alt", ALT.start, {"kind": "alt"}, 0.82, note="known: alt 0.82x vs this incumbent on X, run r")


def drive_known(n, known, seed=0, structures=(REF, ALT), deferred=(), trials=()):
    trials = [INCUMBENT, *trials]
    props = []
    for _ in range(n):
        p = propose(list(structures), trials, seed, known=list(known), deferred=list(deferred))
        if p is None:
            break
        props.append(p)
        trials.append(Trial(p.structure.name, p.config, 1.0 - 0.01 * len(trials)))
    return props


def test_a_structure_known_to_lose_is_never_proposed():
    for seed in range(5):
        props = drive_known(12, [ALT_LOST], seed)
        assert len(props) == 12 and {p.structure.name for p in props} == {"ref"}
        assert "alt 0.82x" in props[0].rationale and ALT_LOST.note in props[0].avoided
    assert drive_known(1, [])[0].rationale == "first look at structure 'alt'"  # without knowledge: the first look


def test_a_known_measurement_that_did_not_lose_is_seen_not_repeated():
    seen_alt = Known("alt", ALT.start, {"kind": "alt"}, 0.97)
    props = drive_known(12, [seen_alt])
    assert all(p.config != ALT.start for p in props) and props[0].phase == "parameters"
    assert "alt" in {p.structure.name for p in props}  # not banned: its mutations are searched


def test_a_losing_change_is_not_repeated_unless_its_structure_measured_it_well():
    a3 = Known("ref", {**REF.start, "a": 3}, {"a": 3}, 0.85)
    for seed in range(5):
        assert all(p.config["a"] != 3 for p in drive_known(12, [a3], seed))
    # 'alt' measured a=3 within 10% of the incumbent: the change is cleared there, not in 'ref'
    alt3 = Known("alt", {**ALT.start, "a": 3}, {"kind": "alt", "a": 3}, 0.99)
    props = [p for seed in range(5) for p in drive_known(20, [a3, alt3], seed)]
    assert not [p for p in props if p.structure.name == "ref" and p.config["a"] == 3]
    assert [p for p in props if p.structure.name == "alt" and p.config["a"] == 3]


def test_a_cleared_losing_change_is_cleared_only_beside_what_cleared_it():
    """a=3 lost alone; beside b=2 it did not: a=3 may come back beside b=2, never beside another b."""
    three = Structure("ref", {"a": [1, 2, 3, 4, 5], "b": [1, 2, 3], "c": [1, 2]},
                      {"kind": "ref", "a": 1, "b": 1, "c": 1})
    a3 = Known("ref", {**three.start, "a": 3}, {"a": 3}, 0.85)
    a3b2 = Known("ref", {**three.start, "a": 3, "b": 2}, {"a": 3, "b": 2}, 0.97)
    props = [p for seed in range(6) for p in drive_known(20, [a3, a3b2], seed, structures=(three,))]
    assert len(props) == 120 and not [p for p in props if "nothing else left" in p.rationale]
    with_a3 = [p.config for p in props if p.config["a"] == 3]
    assert with_a3 and all(c["b"] == 2 for c in with_a3)  # only {a 3, b 2, c 2}: {a 3, b 2, c 1} was seen


def test_a_known_loser_is_taken_only_when_nothing_else_is_left():
    tiny = Structure("ref", {"a": [1, 2]}, {"kind": "ref", "a": 1})
    alt = Structure("alt", {"a": [1, 2]}, {"kind": "alt", "a": 1})
    lost = Known("alt", alt.start, {"kind": "alt"}, 0.6, note="known: alt 0.60x vs this incumbent on X, run r")
    props = drive_known(5, [lost], structures=(tiny, alt))
    assert [p.structure.name for p in props] == ["ref", "alt"]  # ref a=2, then the only unseen point left
    assert props[1].rationale.startswith("nothing else left, so despite known: alt 0.60x")


def test_without_knowledge_the_search_is_unchanged():
    trials = drive(6)
    for seed in range(4):
        a, b = propose([FAST, SLOW], trials, seed), propose([FAST, SLOW], trials, seed, known=[])
        assert (a.structure.name, a.config, a.rationale) == (b.structure.name, b.config, b.rationale)


# -- first looks that lost against earlier code (a hand-edited incumbent) ---------------------------

from aka.agent.search import Deferred  # noqa: E402

# on the H200 (2026-12-07) single_pass's first look measured 0.73x and 0.614x against two earlier
# incumbents, then 0.506x against the hand-edited one
ALT_STALE = Deferred("alt", (0.614, 0.73), note="stale: alt (structure) 0.61x, 0.73x vs earlier code, runs r, s")


def test_a_structure_whose_first_looks_lost_against_earlier_code_is_deferred():
    for seed in range(5):
        props = _drive_deferred(12, [ALT_STALE], seed)
        assert len(props) == 12 and {p.structure.name for p in props} == {"ref"}  # no first look, no mutation
        assert props[0].phase == "parameters"
        assert "[skipped, measured slower here before: alt 0.61x, 0.73x against earlier code]" in props[0].rationale
        assert ALT_STALE.note in props[0].avoided
    assert _drive_deferred(1, [])[0].rationale == "first look at structure 'alt'"  # without it: the first look


def _drive_deferred(n, deferred, seed=0, structures=(REF, ALT), known=(), trials=()):
    return drive_known(n, known, seed, structures, deferred, trials)


def test_a_deferred_structure_is_taken_when_nothing_else_is_left():
    tiny = Structure("ref", {"a": [1, 2]}, {"kind": "ref", "a": 1})
    alt = Structure("alt", {"a": [1, 2]}, {"kind": "alt", "a": 1})
    props = _drive_deferred(5, [ALT_STALE], structures=(tiny, alt))
    assert [p.structure.name for p in props] == ["ref", "alt", "alt"]  # ref a=2, then only alt is left
    assert props[0].rationale.endswith("[skipped, measured slower here before: alt 0.61x, 0.73x against earlier code]")
    assert props[1].rationale == ("nothing else left, so despite first looks measured slower before: "
                                  "alt 0.61x, 0.73x against earlier code: first look at structure 'alt'")
    assert props[1].config == alt.start
    # its first look did not lose (score 0.98 > LOSS): the deferral is gone, the mutation is plain
    assert not props[2].rationale.startswith("nothing else left")


def test_a_measurement_here_that_did_not_lose_cancels_a_deferral():
    plain = _drive_deferred(6, [])
    for known, trials in (([Known("alt", ALT.start, {"kind": "alt"}, 0.97)], ()),  # applicable knowledge
                          ((), [Trial("alt", ALT.start, 0.95)])):  # this run's own first look
        base = _drive_deferred(6, [], known=known, trials=trials)
        got = _drive_deferred(6, [ALT_STALE], known=known, trials=trials)
        assert [(p.structure.name, p.config, p.rationale, p.avoided) for p in got] == \
               [(p.structure.name, p.config, p.rationale, p.avoided) for p in base]
        assert "alt" in {p.structure.name for p in got}
    # one that lost in this run keeps it deferred: alt is not mutated while ref has moves
    lost_here = _drive_deferred(6, [ALT_STALE], trials=[Trial("alt", ALT.start, 0.5)])
    assert {p.structure.name for p in lost_here} == {"ref"}
    assert plain[0].rationale == "first look at structure 'alt'"


def test_deferral_is_replayable():
    props = _drive_deferred(8, [ALT_STALE], seed=3)
    trials = [INCUMBENT]
    for i, p in enumerate(props):
        again = propose([REF, ALT], list(trials), 3, deferred=[ALT_STALE])
        assert (again.structure.name, again.config, again.rationale) == (p.structure.name, p.config, p.rationale), i
        trials.append(Trial(p.structure.name, p.config, 1.0 - 0.01 * len(trials)))
