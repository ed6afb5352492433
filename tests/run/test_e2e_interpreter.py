"""The real path on CPU: offline backend, real policy/compile/gate/bench workers, Triton's interpreter.

Nothing is injected here, so nothing may be promoted: interpreter timings never promote.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aka.agent.llm.base import get_backend
from aka.contract.ops import get_op
from aka.evaluate.parent.evaluator import RealEvaluator
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.settings import Budget, OptimizeSettings

REPO = Path(__file__).resolve().parents[2]


def copy_project(tmp: Path) -> Path:
    root = tmp / "proj"
    root.mkdir()
    shutil.copytree(REPO / "workloads", root / "workloads")
    shutil.copytree(REPO / "kernels", root / "kernels", ignore=shutil.ignore_patterns("promoted.*", "__pycache__"))
    shutil.copytree(REPO / "wiki", root / "wiki")
    return root


def test_one_real_candidate_on_a_tiny_shape(tmp_path):
    """~20 s: gate and bench on E1 (one token) only, one offline candidate, real workers."""
    root = copy_project(tmp_path)
    op = get_op("gdn_prefill", root)
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=1), interpreter=True,
                                cpu_gate_sets=["E1"], cpu_bench_shapes="E1", prepare_ahead=0)
    ev = RealEvaluator(op, settings)
    store = prepare_run(tmp_path / "runs", settings, op, ev)
    assert store.read_run().baseline.incumbent_gate.ok, store.read_run().baseline
    summary = run_loop(store, settings, op, get_backend("offline"), ev)
    (rec,) = store.attempts()
    assert rec.check.ok and rec.compile.ok, rec
    assert rec.gate.passed == {"E1": [True, True, True]} and rec.bench.timing == "interpreter"  # + the warm call
    assert rec.decision.reason == "not promoted: interpreter timings cannot promote"
    assert summary["attempts"] == 1 and not (root / "kernels/gdn_prefill/promoted.py").exists()
    # issue 9: compile stats recorded per attempt, explicitly unavailable in the interpreter
    assert rec.compile.compile_stats["reason"].startswith("unavailable: interpreter")
    assert store.read_run().profile["note"] == "no profile: CPU interpreter"
    # issue 8: the plan cites the wiki cards of its change; the run's lessons carry them
    assert rec.plan.cited_wiki, rec.plan
    assert (store.path / "lessons.jsonl").read_text().count(rec.plan.cited_wiki[0]) == 1


@pytest.mark.slow
def test_cli_main_command_end_to_end(tmp_path):
    """README's main command on a copy of the project: ends with a summary, promotes nothing (~1.5 min)."""
    root = copy_project(tmp_path)
    env = {**os.environ, "AKA_ROOT": str(root), "COLUMNS": "200"}
    env.pop("TRITON_INTERPRET", None)
    code = "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()"
    r = subprocess.run([sys.executable, "-c", code, "optimize", "gdn_prefill", "--budget", "1"],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "summary" in r.stdout and "stopped: budget of 1 candidates used" in r.stdout
    assert "interpreter timings cannot promote" in r.stdout
    assert not (root / "kernels/gdn_prefill/promoted.py").exists()
