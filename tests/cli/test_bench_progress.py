"""`aka bench`'s line per finished shape: both timings where the worker measured both (the graph time
is what the loop ranks on, the eager one holds the host's cost)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from bench_values import bench_value
from rich.console import Console

from aka.cli import bench as cli_bench
from aka.evaluate.parent.runner import WorkerResult
from aka.evaluate.wire import BenchPayload


def test_a_progress_line_gives_the_graph_time_beside_the_eager_one(monkeypatch):
    def fake_run(task, payload, *, timeout):
        line = {"shape": "D1-q1", "done": 1, "total": 1, "median_us": {"promoted": 125.4, "sdpa": 190.0},
                "graph_us": {"promoted": 59.8}, "interpreter": False, "elapsed_s": 1.0}
        Path(payload.progress_path).write_text(json.dumps(line) + "\n")
        return WorkerResult(ok=True, value=bench_value([]).model_dump())

    out = io.StringIO()
    monkeypatch.setattr(cli_bench.door, "run", fake_run)
    monkeypatch.setattr(cli_bench, "console", Console(file=out, width=80))
    assert cli_bench.run_worker(BenchPayload(op="fa4_decode", impls=[]), timeout=10, total=1) == bench_value([])
    assert "D1-q1  promoted 125.4 µs (graph 59.8), sdpa 190.0 µs  [1 s]" in out.getvalue()


def _row(shape: str, us: float) -> dict:
    return {"shape": shape, "params": "", "flops": 0.0, "bytes": 0.0, "floor_us": None,
            "results": {"baseline": {"eager": {"kind": "gpu-eager", "median_us": us, "q1_us": us, "q3_us": us, "n": 1,
                                               "stop": "max_iters"}}}}


def test_a_worker_killed_midway_keeps_the_shapes_it_finished(monkeypatch, tmp_path):
    """2026-12-06 on the device: three implementations on ten shapes outlasted --timeout after nine, and the
    summary table and --csv file were lost with the worker. What it finished is printed and written, marked
    partial and unchecked, before the one-line error (exit 1)."""
    from typer.testing import CliRunner

    from aka.cli.main import app

    def fake_run(task, payload, *, timeout):
        lines = [{"shape": s, "done": i + 1, "total": 3, "median_us": {"baseline": us}, "device": "NVIDIA H100",
                  "row": _row(s, us)} for i, (s, us) in enumerate([("G1", 300.0), ("G2", 200.0)])]
        Path(payload.progress_path).write_text("".join(json.dumps(x) + "\n" for x in lines))
        return WorkerResult(ok=False, stage="timeout", error="no result within 10 s: killed")

    monkeypatch.setattr(cli_bench.door, "run", fake_run)
    monkeypatch.setattr(cli_bench, "console", Console(file=io.StringIO(), width=80))
    out = tmp_path / "b.csv"
    res = CliRunner().invoke(app, ["bench", "gdn_prefill", "--impl", "baseline", "--shapes", "G1,G2,G3",
                                   "--csv", str(out), "--timeout", "10"])
    assert res.exit_code != 0
    assert isinstance(res.exception, cli_bench.BenchRunError) and "no result within 10 s" in str(res.exception)
    assert res.exception.partial.notes[0].startswith("partial: the worker stopped after 2 of 3 shapes")
    rows = list(csv.DictReader(out.open()))
    assert [(r["shape"], r["impl"], r["median_us"], r["kind"]) for r in rows] == [
        ("G1", "baseline", "300.0", "gpu-eager"), ("G2", "baseline", "200.0", "gpu-eager")]


def test_a_worker_that_finished_no_shape_has_no_partial_result(monkeypatch, tmp_path):
    def fake_run(task, payload, *, timeout):
        return WorkerResult(ok=False, stage="timeout", error="no result within 10 s: killed")

    monkeypatch.setattr(cli_bench.door, "run", fake_run)
    monkeypatch.setattr(cli_bench, "console", Console(file=io.StringIO(), width=80))
    try:
        cli_bench.run_worker(BenchPayload(op="gdn_prefill", impls=[]), timeout=10, total=2)
    except cli_bench.BenchRunError as exc:
        assert exc.partial is None and "no result within 10 s" in str(exc)
    else:
        raise AssertionError("a failed worker must raise")


def test_a_bench_stopped_by_a_signal_writes_what_it_finished(monkeypatch, tmp_path):
    """2026-12-07 on the device: `timeout 200 aka bench` (SIGTERM, which aka.cli.main turns into
    KeyboardInterrupt) stopped three implementations after seven of ten shapes, and the table and --json
    file were lost although the progress lines had printed every median. Now the finished shapes are
    written, marked partial and unchecked, and printed; the stop itself still propagates."""
    import threading

    from typer.testing import CliRunner

    from aka.cli.main import app

    written, release = threading.Event(), threading.Event()

    def fake_run(task, payload, *, timeout):
        lines = [{"shape": s, "done": i + 1, "total": 3, "median_us": {"baseline": us}, "device": "NVIDIA H100",
                  "row": _row(s, us)} for i, (s, us) in enumerate([("G1", 300.0), ("G2", 200.0)])]
        Path(payload.progress_path).write_text("".join(json.dumps(x) + "\n" for x in lines))
        written.set()
        release.wait(10)  # still running when the signal comes
        return WorkerResult(ok=False, stage="killed", error="killed")

    def stop(_s):  # the poll loop's sleep, once it has read both lines: the signal arrives here
        if not written.wait(10) or not seen_both():
            return
        release.set()
        raise KeyboardInterrupt("SIGTERM")

    out = io.StringIO()

    def seen_both():
        return "G2" in out.getvalue()

    monkeypatch.setattr(cli_bench.door, "run", fake_run)
    monkeypatch.setattr(cli_bench.time, "sleep", stop)
    monkeypatch.setattr(cli_bench, "console", Console(file=out, width=100))
    js = tmp_path / "b.json"
    res = CliRunner().invoke(app, ["bench", "gdn_prefill", "--impl", "baseline", "--shapes", "G1,G2,G3",
                                   "--json", str(js), "--timeout", "10"])
    assert res.exit_code != 0  # click's Abort, which aka.cli.main turns into 130 / 143 / 129
    got = json.loads(js.read_text())
    assert [r["shape"] for r in got["rows"]] == ["G1", "G2"]
    assert got["notes"][0].startswith("partial: the worker stopped after 2 of 3 shapes (stopped by Ctrl-C or a signal)")
    assert "G2" in out.getvalue() and "partial" in out.getvalue()
