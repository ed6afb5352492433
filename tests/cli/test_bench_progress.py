"""`aka bench`'s line per finished shape: both timings where the worker measured both (the graph time
is what the loop ranks on, the eager one holds the host's cost)."""

from __future__ import annotations

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
