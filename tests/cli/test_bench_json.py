"""`aka bench --json` files written before the bench value was typed (main at 83def09) read as a
BenchValue and write back the same JSON: the same keys, a cell holding only those its producer set.

data/bench_83def09.json is that version's `aka bench gdn_prefill --impl baseline,fla --shapes S1` in the
interpreter (a timed cell, a skipped one); data/bench_gpu_83def09.json its harness's cells on a GPU
(_time_shape with device "cuda", the timers, peak memory and graph capture stood in) judged by its
bench_judged: a verified cell with a graph timing, a rejected one whose capture failed, a skipped one."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from aka.cli.bench import notes, render, write_csv
from aka.evaluate.parent.outcomes import bench_outcome, eager_medians
from aka.evaluate.wire import BenchValue

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["bench_83def09.json", "bench_gpu_83def09.json"])
def test_an_old_bench_file_reads_and_writes_back_the_same(name):
    old = json.loads((DATA / name).read_text())
    value = BenchValue.model_validate(old)
    extra = {k: old[k] for k in ("skipped",) if k in old}  # aka bench adds its resolution's skips
    assert {**value.model_dump(), **extra} == old
    assert json.loads(json.dumps(value.model_dump())) == {k: v for k, v in old.items() if k not in extra}


def test_the_readers_read_an_old_interpreter_file(tmp_path):
    value = BenchValue.model_validate(json.loads((DATA / "bench_83def09.json").read_text()))
    cell = value.rows[0].results["baseline"]
    assert cell.eager.kind == "interpreter" and cell.verified == 2 and cell.roofline_frac is None
    assert bench_outcome(value, "graph", "baseline").times_us == {"S1": cell.eager.median_us}
    times, untimed = eager_medians(value)
    assert times == {"baseline": {"S1": cell.eager.median_us}} and [(n, s) for n, s, _ in untimed] == [("fla", "S1")]
    assert "fla: skipped: ImportError: fla not importable" in " ".join(notes(value, []))
    assert render(value).row_count == 2  # S1 and the geomean
    write_csv(value, tmp_path / "b.csv")
    rows = list(csv.DictReader((tmp_path / "b.csv").open()))
    assert [(r["impl"], r["kind"], r["status"]) for r in rows] == [("baseline", "interpreter", "ok"),
                                                                  ("fla", "interpreter", "skipped")]


def test_the_readers_read_an_old_gpu_file():
    value = BenchValue.model_validate(json.loads((DATA / "bench_gpu_83def09.json").read_text()))
    a, b, c = (value.rows[0].results[n] for n in "abc")
    assert a.graph.median_us == 11.0 and a.peak_extra_bytes == 4096 and a.verified == 2
    assert b.rejected and b.error.startswith("timed output wrong") and b.discarded.graph is None
    assert "no graph: RuntimeError" in b.discarded.graph_note and c.skipped and not c.rejected
    out = bench_outcome(value, "graph", "a", "b")
    assert out.times_us == {"S1": 11.0} and out.roofline == {"S1": 5.0 / 11.0} and out.incumbent_us == {}
    assert bench_outcome(value, "graph", "b").error.startswith("S1: timed output wrong")
