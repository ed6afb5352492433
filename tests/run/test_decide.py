"""Every rule of decide(): a case that must promote next to one that must not."""

from __future__ import annotations

import pytest

from aka.records import Measurements
from aka.run.supervisor import decide
from aka.settings import PromotionRules

SHAPES = ["G1", "G2", "G3"]
RULES = PromotionRules()


def good(**over) -> Measurements:
    base = dict(
        gate={s: [True, True, True] for s in ["S1", "E1", *SHAPES]},
        gate_sets=["smoke", "edge", "full"],
        timing="gpu",
        ratios={s: 1.10 for s in SHAPES},
        expected_shapes=SHAPES,
        geomean=1.10,
        noise=0.01,
    )
    base.update(over)
    return Measurements(**base)


def test_clean_win_promotes():
    d = decide(good(), RULES)
    assert d.promote and d.verdict == "promoted" and "+10.00%" in d.reason


@pytest.mark.parametrize(
    "over, words",
    [
        ({"check_error": "imports torch.matmul"}, "static check failed"),
        ({"compile_error": "SyntaxError"}, "compile failed"),
        ({"gate": {"S1": [True, False, True], "G1": [True]}}, "S1 round 2"),
        ({"gate": {"S1": [False]}, "gate_error": "S1: o: rel L2 3e-2"}, "1 shape(s): S1: o: rel L2"),
        ({"gate": {}}, "no gate result"),
        ({"gate_error": "NaN in o"}, "gate failed"),
        ({"bench_error": "G4: OutOfMemoryError"}, "bench failed: G4"),
    ],
)
def test_anything_failed_before_timing_is_rejected(over, words):
    d = decide(good(**over), RULES)
    assert not d.promote and d.verdict == "rejected" and words in d.reason


def test_interpreter_timings_never_promote_even_when_much_faster():
    d = decide(good(timing="interpreter", geomean=5.0, ratios={s: 5.0 for s in SHAPES}), RULES)
    assert not d.promote and d.reason == "not promoted: interpreter timings cannot promote"


def test_gate_must_cover_the_full_set():
    assert decide(good(gate_sets=["smoke", "edge", "full"]), RULES).promote
    d = decide(good(gate_sets=["smoke", "edge"]), RULES)
    assert not d.promote and "not the full set" in d.reason
    d = decide(good(gate={"S1": [True], "G1": [True], "G2": [True]}), RULES)  # G3 never gated
    assert not d.promote and "not the full set" in d.reason


def test_comparison_required_and_complete():
    assert not decide(good(geomean=None), RULES).promote
    assert not decide(good(timing="none"), RULES).promote
    d = decide(good(ratios={"G1": 1.1, "G2": 1.1}), RULES)
    assert not d.promote and "missing shapes G3" in d.reason


def test_small_screen_gain_is_not_remeasured():
    d = decide(good(geomean=None, ratios={}, screen_gain=0.002), RULES)
    assert not d.promote and "too small to re-measure" in d.reason


@pytest.mark.parametrize("gm, promote", [(1.011, True), (1.0099, False), (1.005, False), (0.98, False)])
def test_gain_must_exceed_min_gain(gm, promote):
    d = decide(good(geomean=gm, noise=0.001, ratios={s: gm for s in SHAPES}), RULES)
    assert d.promote is promote
    if not promote:
        assert "min-gain" in d.reason


def test_min_gain_is_a_setting():
    m = good(geomean=1.03, noise=0.001, ratios={s: 1.03 for s in SHAPES})
    assert decide(m, PromotionRules(min_gain=0.02)).promote
    assert not decide(m, PromotionRules(min_gain=0.05)).promote


def test_gain_must_exceed_noise():
    assert decide(good(geomean=1.05, noise=0.04), RULES).promote
    d = decide(good(geomean=1.05, noise=0.06), RULES)
    assert not d.promote and "noise" in d.reason


def test_shape_regression_beyond_margin_blocks_unless_allowed():
    ok = good(ratios={"G1": 1.3, "G2": 1.2, "G3": 0.96})  # 4% slower: inside the 5% margin
    assert decide(ok, RULES).promote
    bad = good(ratios={"G1": 1.3, "G2": 1.2, "G3": 0.90})
    d = decide(bad, RULES)
    assert not d.promote and "G3 slower by 10.0%" in d.reason and d.blocked_by == "G3"
    allowed = decide(bad, PromotionRules(allow_shape_regression=True))
    assert allowed.promote and "allowed regressions on G3" in allowed.reason and not allowed.blocked_by
    assert not decide(good(geomean=1.05, noise=0.06), RULES).blocked_by  # refused, but not by a shape
    assert decide(bad, PromotionRules(shape_margin=0.15)).promote


def test_decide_is_pure():
    m = good()
    before = m.model_dump()
    assert decide(m, RULES) == decide(m, RULES)
    assert m.model_dump() == before
