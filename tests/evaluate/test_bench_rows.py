"""One reading of a bench_worker result (aka.evaluate.parent.outcomes.eager_medians), as the loop's competitor
timing and `aka regress` both use it."""

from __future__ import annotations

from bench_values import bench_value

from aka.contract.ops import get_op
from aka.evaluate.host.bench import BenchConfig
from aka.evaluate.parent import door, evaluator
from aka.evaluate.parent.outcomes import eager_medians
from aka.settings import OptimizeSettings

ROWS = bench_value([
    {"shape": "G1", "results": {"fla": {"eager": {"median_us": 5.0}}, "flashqla": {"skipped": "not installed"}}},
    {"shape": "G2", "results": {"fla": {"error": "boom", "skipped": "x"}, "flashqla": {"skipped": "not installed"}}},
    {"shape": "G3", "results": {"fla": {"eager": {"median_us": 7.0}}, "flashqla": {"eager": {"median_us": 6.0}}}},
], kind="interpreter")


def test_eager_medians_of_every_implementation_in_row_order():
    times, untimed = eager_medians(ROWS)
    assert times == {"fla": {"G1": 5.0, "G3": 7.0}, "flashqla": {"G3": 6.0}}
    assert [(n, s) for n, s, _ in untimed] == [("flashqla", "G1"), ("fla", "G2"), ("flashqla", "G2")]


def test_eager_medians_of_named_implementations_keeps_an_untimed_one():
    times, untimed = eager_medians(ROWS.model_copy(update={"rows": ROWS.rows[:2]}), ["flashqla", "fla"])
    assert list(times) == ["flashqla", "fla"] and times == {"flashqla": {}, "fla": {"G1": 5.0}}
    assert [(n, s, c.error) for n, s, c in untimed] == [("flashqla", "G1", None), ("flashqla", "G2", None),
                                                              ("fla", "G2", "boom")]


def test_competitor_times_and_one_note_per_competitor(monkeypatch):
    op = get_op("gdn_prefill")
    monkeypatch.setattr(door, "call", lambda *a: (True, ROWS.model_dump(), ""))
    ev = evaluator.RealEvaluator(op, OptimizeSettings(op=op.name, interpreter=True))
    times, notes = ev.competitors("full")
    assert times == {"fla": {"G1": 5.0, "G3": 7.0}, "flashqla": {"G3": 6.0}}
    assert notes == ["flashqla: not installed", "fla: x"]  # a skip is named before an error
    monkeypatch.setattr(door, "call", lambda *a: (False, None, "timeout: killed"))
    assert ev.competitors("full") == ({}, ["competitor timing failed (timeout: killed); the run goes on without "
                                           "them (--no-competitors skips it)"])


def test_competitor_timing_shows_a_line_a_shape_when_the_command_follows_progress(monkeypatch):
    """stdout into a file: the deferred competitor timing reports each shape as the baseline's does."""
    from aka.evaluate.wire import ProgressLine

    op = get_op("gdn_prefill")

    def following(task, payload, timeout, interpreter, on_line):
        on_line(ProgressLine(shape="G1", done=1, total=3, median_us={"fla": 5.0}))
        return True, ROWS.model_dump(), ""

    monkeypatch.setattr(door, "call", lambda *a: (_ for _ in ()).throw(AssertionError("no progress followed")))
    monkeypatch.setattr(door, "call_following", following)
    ev = evaluator.RealEvaluator(op, OptimizeSettings(op=op.name, interpreter=True))
    seen = []
    ev.on_shape = seen.append
    times, _ = ev.competitors("full")
    assert [(r.shape, r.done, r.median_us) for r in seen] == [("G1", 1, {"fla": 5.0})]
    assert times["fla"] == {"G1": 5.0, "G3": 7.0}


GRAPH_ROWS = bench_value([
    {"shape": "D1", "floor_us": 50.0, "results": {
        "incumbent": {"eager": {"median_us": 300.0}, "graph": {"median_us": 200.0}},
        "candidate": {"eager": {"median_us": 250.0}, "graph": {"median_us": 210.0}, "roofline_frac": 0.2}}},
    {"shape": "D2", "floor_us": None, "results": {
        "incumbent": {"eager": {"median_us": 90.0}, "graph": {"median_us": 60.0}},
        "candidate": {"eager": {"median_us": 80.0}, "graph": None, "graph_note": "no graph: RuntimeError: sync"}}},
])
INTERP_ROWS = GRAPH_ROWS.model_copy(update={"kind": "interpreter"})


def test_bench_outcome_reads_the_ranked_timing():
    """Ranked on graph replay (fa4_decode), the candidate that is faster eager but slower replayed
    loses; a shape it cannot be captured on is an error that says why."""
    from aka.evaluate.parent.outcomes import bench_outcome

    eager = bench_outcome(GRAPH_ROWS)
    assert eager.times_us == {"D1": 250.0, "D2": 80.0} and eager.incumbent_us == {"D1": 300.0, "D2": 90.0}
    assert eager.roofline == {"D1": 0.2} and eager.error == ""
    graph = bench_outcome(GRAPH_ROWS, "graph")
    assert graph.times_us == {"D1": 210.0} and graph.incumbent_us == {"D1": 200.0, "D2": 60.0}
    assert graph.roofline == {"D1": 50.0 / 210.0}
    assert graph.error == "D2: no graph timing (no graph: RuntimeError: sync)"
    interp = bench_outcome(INTERP_ROWS, "graph")  # no graphs there: eager
    assert interp.times_us == eager.times_us and interp.timing == "interpreter"


def test_medians_in_graph_timing_name_the_missing_capture():
    times, untimed = eager_medians(GRAPH_ROWS, ["candidate"], "graph")
    assert times == {"candidate": {"D1": 210.0}}
    assert [(n, s, c.error) for n, s, c in untimed] == [
        ("candidate", "D2", "no graph timing: no graph: RuntimeError: sync")]


def test_an_op_ranked_on_graphs_times_and_compares_graph_replays(monkeypatch):
    """On a GPU the evaluator asks the screen for graph replays and the ABBA for replayed calls;
    in the interpreter nothing changes (eager, no graphs)."""
    op = get_op("fa4_decode")
    ev = evaluator.RealEvaluator(op, OptimizeSettings(op=op.name, interpreter=False))
    assert ev.rank == "graph" and ev.screen_cfg["graph"] and ev.compare_cfg["graph"]
    default = BenchConfig()  # the timing procedure's defaults, stated once there
    for cfg in (ev.screen_cfg, ev.compare_cfg):
        assert (cfg["warmup"], cfg["input_copies"]) == (default.warmup, default.input_copies)
        assert BenchConfig.model_validate(cfg).eager_iters == 8  # graph-ranked: eager only for the host's cost
    assert ev.compare_cfg["max_iters"] == default.max_iters and ev.screen_cfg["max_iters"] < default.max_iters
    sent = []
    monkeypatch.setattr(door, "call", lambda entry, payload, *a: (sent.append(payload), (False, None, "x"))[1])
    ev.compare(op.path("baseline"), op.path("baseline"), "D1-q1")
    assert sent[-1].rank == "graph"
    for name in ("gdn_prefill", "fa4_prefill"):  # issue 36: every op ranks on the kernel's GPU time
        other = evaluator.RealEvaluator(get_op(name), OptimizeSettings(op=name, interpreter=False))
        assert other.rank == "graph" and other.screen_cfg["graph"] and other.compare_cfg["graph"]
    cpu = evaluator.RealEvaluator(op, OptimizeSettings(op=op.name, interpreter=True))
    assert cpu.rank == "eager" and cpu.screen_cfg is None


def test_the_host_cost_is_eager_minus_graph_and_never_the_ranked_time(tmp_path):
    """Issue 36: the host's cost per call is its own figure (bench outcome, bench table and CSV), and the
    ranked times stay the replays'."""
    import csv

    from aka.cli.bench import _cell_time, write_csv
    from aka.evaluate.parent.outcomes import bench_outcome

    graph = bench_outcome(GRAPH_ROWS, "graph")
    assert graph.host_us == {"D1": 40.0} and graph.incumbent_host_us == {"D1": 100.0, "D2": 30.0}
    assert graph.times_us == {"D1": 210.0}  # the replay, not the eager time
    assert "host 40.0" in _cell_time(GRAPH_ROWS.rows[0].results["candidate"])
    assert "host" not in _cell_time(GRAPH_ROWS.rows[1].results["candidate"])  # no replay: no figure
    path = tmp_path / "b.csv"
    write_csv(GRAPH_ROWS, path)
    rows = {(r["shape"], r["impl"]): r for r in csv.DictReader(path.open())}
    assert float(rows["D1", "incumbent"]["host_us"]) == 100.0 and rows["D2", "candidate"]["host_us"] == ""
    interp = bench_outcome(INTERP_ROWS, "graph")
    assert interp.host_us == {}  # interpreter timings give no host figure


def test_the_host_cost_is_read_from_the_interval_closed_on_the_callers_stream():
    """The eager median holds the timer's device-wide sync and its round trip (12-20 µs on an H100's host),
    the same for every implementation and not the call's: the host's cost is the interval closed on the
    caller's stream before that sync, minus the replay. A timing written before that interval existed
    still gives eager minus graph."""
    from aka.evaluate.parent.outcomes import bench_outcome, host_cost

    rows = bench_value([{"shape": "D1", "floor_us": 50.0, "results": {
        "incumbent": {"eager": {"median_us": 300.0, "stream_us": 285.0}, "graph": {"median_us": 200.0}},
        "candidate": {"eager": {"median_us": 250.0}, "graph": {"median_us": 210.0}}}}])
    cells = rows.rows[0].results
    assert host_cost(cells["incumbent"]) == 85.0 and host_cost(cells["candidate"]) == 40.0
    out = bench_outcome(rows, "graph")
    assert out.incumbent_host_us == {"D1": 85.0} and out.times_us == {"D1": 210.0}
    assert cells["incumbent"].eager.model_dump()["stream_us"] == 285.0
    assert "stream_us" not in cells["candidate"].eager.model_dump()  # older files read and write back unchanged
