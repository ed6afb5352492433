"""Promotion figures (issue 21, item 4): "vs baseline" is the ABBA "vs previous" chained from the
baseline, in promoted.json, the commit message and `aka history` alike."""

from __future__ import annotations

import json
import subprocess

import pytest
from fakes import FakeEvaluator, source
from typer.testing import CliRunner

from aka.agent.llm.scripted import ScriptedBackend
from aka.cli.main import app
from aka.evaluate.parent.outcomes import code_hash
from aka.records import Promoted
from aka.report.tables import promotion_rows
from aka.run import gitops
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.settings import Budget, OptimizeSettings

SHAPES = [f"G{i}" for i in range(1, 11)]


def _promote(project, src, meta, message):
    gitops.promote(project, "gdn_prefill", src, Promoted(code_hash=code_hash(src), **meta), message, True)


def test_history_chains_vs_baseline_from_the_abba_figures(project, monkeypatch):
    # the first promotion as aka recorded it before the chain: vs baseline from the screen's times
    a, b = source(1.068, "a"), source(1.12, "b")
    _promote(project, a, {"geomean_vs_previous": 1.068, "geomean_vs_baseline": 1.017, "run_id": "r1"}, "promote a")
    _promote(project, b, {"geomean_vs_previous": 1.05, "geomean_vs_baseline": 0.5, "run_id": "r2"}, "promote b")
    gitops.rollback(project, "gdn_prefill")  # back to a: a commit that measured nothing
    rows, _ = promotion_rows(project, "gdn_prefill")
    assert [r.vs_previous for r in rows] == pytest.approx([1.068, 1.05, None])
    assert [r.vs_baseline for r in rows] == pytest.approx([1.068, 1.068 * 1.05, 1.068])
    monkeypatch.setenv("AKA_ROOT", str(project))
    monkeypatch.setenv("COLUMNS", "200")
    res = CliRunner().invoke(app, ["history", "gdn_prefill", "--json"])
    assert res.exit_code == 0, res.output
    newest_first = json.loads(res.stdout)
    assert [p["vs_previous"] for p in newest_first] == pytest.approx([None, 1.05, 1.068])
    assert [p["vs_baseline"] for p in newest_first] == pytest.approx([1.068, 1.068 * 1.05, 1.068])
    table = CliRunner().invoke(app, ["history", "gdn_prefill"]).stdout
    first = next(line for line in table.splitlines() if "promote a" in line)
    assert first.count("1.068x") == 2 and "1.017x" not in table


def test_removing_the_promoted_kernel_puts_the_chain_back_on_the_baseline(project):
    a, b = source(1.2, "a"), source(1.1, "b")
    _promote(project, a, {"geomean_vs_previous": 1.2}, "promote a")
    subprocess.run(["git", "rm", "-q", "kernels/gdn_prefill/promoted.py", "kernels/gdn_prefill/promoted.json"],
                   cwd=project, check=True)
    subprocess.run(["git", "commit", "-qm", "fold a into the baseline"], cwd=project, check=True)
    _promote(project, b, {"geomean_vs_previous": 1.1}, "promote b")
    rows, _ = promotion_rows(project, "gdn_prefill")
    assert [r.vs_baseline for r in rows] == pytest.approx([1.2, None, 1.1])


def test_a_run_from_a_promoted_kernel_chains_from_its_record_not_the_set_up_timing(project, op):
    # the record says 1.25 (ABBA chain); the set-up's single timing of the same kernel reads 1.2
    inc = source(1.2, "a")
    _promote(project, inc, {"geomean_vs_previous": 1.25, "geomean_vs_baseline": 1.25,
                            "speedup_vs_baseline": {s: 1.25 for s in SHAPES}}, "promote a")
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=1))
    ev = FakeEvaluator(op)
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, ScriptedBackend([{"source": source(1.32, "d")}]), ev)
    assert store.attempts()[0].decision.promote
    meta = gitops.read_promoted_meta(project, "gdn_prefill")
    assert meta.geomean_vs_previous == pytest.approx(1.1)
    assert meta.geomean_vs_baseline == pytest.approx(1.25 * 1.1)
    assert meta.speedup_vs_baseline["G3"] == pytest.approx(1.25 * 1.1)
    log = subprocess.run(["git", "log", "-1", "--format=%s"], cwd=project, capture_output=True, text=True).stdout
    assert "1.375x vs baseline" in log
    rows, _ = promotion_rows(project, "gdn_prefill")
    assert rows[-1].vs_baseline == pytest.approx(meta.geomean_vs_baseline)  # history agrees with the record


def test_a_record_in_another_timing_is_not_chained_from(project, op):
    """A promoted.json made under eager ranking says nothing about graph replay: an op that now ranks
    on graphs starts from the set-up's own timing of that kernel (fa4_decode, 2026-12-03), and a new
    promotion records the timing its numbers are in."""
    inc = source(1.2, "a")
    _promote(project, inc, {"geomean_vs_previous": 1.25, "geomean_vs_baseline": 1.25,
                            "speedup_vs_baseline": {s: 1.25 for s in SHAPES}}, "promote a")
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=1))
    ev = FakeEvaluator(op)
    ev.rank = "graph"  # as RealEvaluator on a GPU for an op whose contract ranks on graph replay
    store = prepare_run(project / "runs", settings, op, ev)
    run = store.read_run()
    assert run.baseline.rank_timing == "graph"
    assert run.incumbent.standing["from"] == "set-up timings"
    assert run.incumbent.standing["geomean"] == pytest.approx(1.2)
    run_loop(store, settings, op, ScriptedBackend([{"source": source(1.32, "d")}]), ev)
    meta = gitops.read_promoted_meta(project, "gdn_prefill")
    assert meta.timing == "graph" and meta.times_note.startswith("graph medians")
    assert meta.geomean_vs_baseline == pytest.approx(1.2 * 1.1)
    # and the reverse: that graph-timed record read by a run ranked eagerly is not chained from either
    ev2 = FakeEvaluator(op)
    store2 = prepare_run(project / "runs", settings, op, ev2)
    assert store2.read_run().incumbent.standing["from"] == "set-up timings"


def test_set_up_refuses_a_baseline_untimed_on_a_shape_of_the_pair(project):
    """Timed side by side with the incumbent, a baseline that fails a shape still stops the set-up (as
    it did timed alone), naming the shape, instead of leaving a standing over fewer shapes."""
    from aka.contract.ops import get_op
    from aka.run.setup import SetupError

    (project / "kernels" / "gdn_prefill" / "promoted.py").write_text(source(1.2, "promoted"))
    op = get_op("gdn_prefill", project)

    class BaselineFailsS2(FakeEvaluator):
        def bench(self, path, shapes, beside=None, names=("candidate", "incumbent")):
            b = super().bench(path, shapes, beside, names)
            b.incumbent_us.pop("S2", None)
            return b

    settings = OptimizeSettings(op="gdn_prefill", commit=False, interpreter=True)
    with pytest.raises(SetupError, match="timing the baseline failed: no time on S2"):
        prepare_run(project / "runs", settings, op, BaselineFailsS2(op, timing="gpu"))
