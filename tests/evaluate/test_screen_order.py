"""The GPU screen's order (aka.evaluate.checker.tasks.screen_worker with gate_above): timed first, gated only
when its gain could earn the ABBA re-measure, timing stopped once it runs clearly slower
(aka.evaluate.host.harness.losing); the Supervisor says why an ungated candidate lost. Run here in the interpreter
with the pairing the evaluator only asks for on a GPU."""

from __future__ import annotations

from bench_values import bench_value

from aka.contract.ops import get_op
from aka.evaluate.host.harness import losing
from aka.evaluate.parent import door
from aka.evaluate.wire import BenchRow, StopRule
from aka.records import Measurements
from aka.run.supervisor import decide
from aka.settings import PromotionRules

OP = get_op("fa4_decode")
STOP = StopRule(name="candidate", against="incumbent", timing="eager", after=2, below=0.9)


def _row(inc: float, cand: float | None, shape: str = "X") -> BenchRow:
    return bench_value([{"shape": shape, "results": {"incumbent": {"eager": {"median_us": inc}},
                         "candidate": {"eager": {"median_us": cand}} if cand else {"error": "x"}}}]).rows[0]


def test_losing_is_the_geomean_after_enough_shapes():
    assert losing([_row(10, 20)], STOP) == ""  # one shape: too early
    assert "0.632x" in losing([_row(10, 20), _row(10, 12.5)], STOP)  # sqrt(0.5 * 0.8)
    assert losing([_row(10, 20), _row(10, 5)], STOP) == ""  # 1.0x: goes on
    assert losing([_row(10, 20), _row(10, None)], STOP) == ""  # an untimed cell: the checker judges
    assert losing([_row(10, 20), _row(10, 20)], None) == ""


def _screen(tmp_path, source: str, gate_above: float, first: list[str] | None = None,
            shape_below: float | None = None, below: float = 0.9) -> dict:
    path = tmp_path / "candidate.py"
    path.write_text(source)
    kernel = {"kind": "kernel", "function": OP.spec.entry}
    payload = {"op": OP.name, "root": str(OP.root), "force_cpu": True, "kernel": str(path), "gate_shapes": "smoke",
               "rounds": 2, "seed": 0, "shapes": "smoke", "timeout_s": 300, "rank": "eager",
               "impls": [{**kernel, "name": "incumbent", "path": str(OP.path("baseline"))},
                         {**kernel, "name": "candidate", "path": str(path)}],
               "config": {"warmup": 1, "min_iters": 2, "max_iters": 3, "time_cap_s": 0.01, "input_copies": 1},
               "gate_above": gate_above,
               "stop": {**STOP.model_dump(), "after": 1, "below": below, "shape_below": shape_below},
               "first": first or []}
    ok, value, err = door.call("aka.evaluate.checker.tasks:screen_worker", payload, 600, True)
    assert ok, err
    return value


def test_a_slower_candidate_is_timed_on_one_shape_and_never_gated(tmp_path):
    doc = '    """Paged decode for q_len 1 or 4.'
    slow = OP.path("baseline").read_text().replace(doc, '    __import__("time").sleep(0.3)\n' + doc)
    value = _screen(tmp_path, slow, gate_above=0.005)
    assert value["gate"] is None and value["gate_skipped"].startswith("screen gain -"), value["gate_skipped"]
    assert "stopped after 1 of 2 shapes" in value["gate_skipped"]
    assert [r["shape"] for r in value["bench"]["rows"]] == ["S1"]


def test_the_shape_that_refused_a_candidate_is_timed_first_by_the_next_screens(tmp_path):
    slow = OP.path("baseline").read_text().replace(
        "def fa4_decode(", "def fa4_decode(q, *a, **k):  # slow on S1 only (q [2, 4, 256]; S2's is [8, 4, 256])\n"
        "    __import__('time').sleep(1.0 if q.shape[0] == 2 else 0)\n"
        "    return _fa4_decode(q, *a, **k)\n\n\ndef _fa4_decode(", 1)
    # the geomean rule off, the shape rule far below the interpreter's noise: only S1's sleep trips it
    value = _screen(tmp_path, slow, gate_above=0.005, first=["S2"], shape_below=0.5, below=0.0)
    assert [r["shape"] for r in value["bench"]["rows"]] == ["S2", "S1"]  # S2 first, then S1 refuses it
    assert value["slow_shape"] == "S1" and "but S1 at 0." in value["gate_skipped"], value["gate_skipped"]


def test_a_candidate_that_could_win_is_gated_after_its_timing(tmp_path):
    value = _screen(tmp_path, OP.path("baseline").read_text(), gate_above=-0.99)
    assert value["gate"]["passed"] and value["bench"]["rows"], value.get("gate")


def test_one_far_slower_shape_stops_the_timing_whatever_the_geomean():
    stop = STOP.model_copy(update={"shape_below": 0.8})
    rows = [_row(10, 5, "A"), _row(10, 13, "B")]
    assert losing(rows, stop) == "B: candidate at 0.769x incumbent, under 0.8x"
    assert losing(rows[:1], stop) == ""


def test_an_ungated_loser_is_rejected_for_its_speed_not_its_gate():
    m = Measurements(expected_shapes=["S1"], timing="gpu", screen_gain=-0.2,
                     screen_refused="screen gain -20.00% not above 0.50%")
    assert decide(m, PromotionRules()).reason == "screen gain -20.00% not above 0.50% (not gated)"
    m = Measurements(expected_shapes=["S1"], timing="gpu", screen_gain=0.05, screen_slow_shape="S1",
                     screen_refused="screen gain +5.00%, but S1 at 0.700x the incumbent")
    d = decide(m, PromotionRules())
    assert (d.promote, d.blocked_by) == (False, "S1") and d.reason.endswith("(not gated)")
    m = Measurements(expected_shapes=["S1"], timing="gpu", bench_error="S1: raised")
    assert decide(m, PromotionRules()).reason == "bench failed: S1: raised"
