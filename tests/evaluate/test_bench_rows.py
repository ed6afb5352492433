"""One reading of a bench_worker result (aka.evaluate.outcomes.eager_medians), as the loop's competitor
timing and `aka regress` both use it."""

from __future__ import annotations

from aka.contract.ops import get_op
from aka.evaluate import door, evaluator
from aka.evaluate.outcomes import eager_medians
from aka.settings import OptimizeSettings

ROWS = {"rows": [
    {"shape": "G1", "results": {"fla": {"eager": {"median_us": 5.0}}, "flashqla": {"skipped": "not installed"}}},
    {"shape": "G2", "results": {"fla": {"error": "boom", "skipped": "x"}, "flashqla": {"skipped": "not installed"}}},
    {"shape": "G3", "results": {"fla": {"eager": {"median_us": 7.0}}, "flashqla": {"eager": {"median_us": 6.0}}}},
]}


def test_eager_medians_of_every_implementation_in_row_order():
    times, untimed = eager_medians(ROWS)
    assert times == {"fla": {"G1": 5.0, "G3": 7.0}, "flashqla": {"G3": 6.0}}
    assert [(n, s) for n, s, _ in untimed] == [("flashqla", "G1"), ("fla", "G2"), ("flashqla", "G2")]


def test_eager_medians_of_named_implementations_keeps_an_untimed_one():
    times, untimed = eager_medians({"rows": ROWS["rows"][:2]}, ["flashqla", "fla"])
    assert list(times) == ["flashqla", "fla"] and times == {"flashqla": {}, "fla": {"G1": 5.0}}
    assert [(n, s, c.get("error")) for n, s, c in untimed] == [("flashqla", "G1", None), ("flashqla", "G2", None),
                                                              ("fla", "G2", "boom")]


def test_competitor_times_and_one_note_per_competitor(monkeypatch):
    op = get_op("gdn_prefill")
    monkeypatch.setattr(door, "call", lambda *a: (True, ROWS, ""))
    ev = evaluator.RealEvaluator(op, OptimizeSettings(op=op.name, interpreter=True))
    times, notes = ev.competitors("full")
    assert times == {"fla": {"G1": 5.0, "G3": 7.0}, "flashqla": {"G3": 6.0}}
    assert notes == ["flashqla: not installed", "fla: x"]  # a skip is named before an error
    monkeypatch.setattr(door, "call", lambda *a: (False, None, "timeout: killed"))
    assert ev.competitors("full") == ({}, ["competitor timing failed (timeout: killed); the run goes on without "
                                           "them (--no-competitors skips it)"])
