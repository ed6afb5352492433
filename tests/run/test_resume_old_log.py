"""A run written before the typed attempt record (aka at commit 3efb49c, tests/run/data/run_3efb49c:
3 of 5 candidates, 2 promotions, then its scripted backend ran out) resumes under today's code."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from fakes import FakeEvaluator, source

from aka.agent.llm.scripted import ScriptedBackend
from aka.records import read_attempts
from aka.run.loop import run_loop
from aka.run.store import RunStore
from aka.settings import OptimizeSettings

OLD = Path(__file__).parent / "data" / "run_3efb49c"
OLD_ROOT = "/tmp/oldrun/proj"  # where the old run's project lay: run.json names it


def _install(project: Path) -> str:
    """The old run under this project's runs/, and its promoted kernel committed as it was."""
    run_id = json.loads((OLD / "run.json").read_text())["run_id"]
    dest = project / "runs" / "gdn_prefill" / run_id
    shutil.copytree(OLD, dest, ignore=shutil.ignore_patterns("promoted.*"))
    (dest / "run.json").write_text((dest / "run.json").read_text().replace(OLD_ROOT, str(project)))
    for name in ("promoted.py", "promoted.json"):
        shutil.copy(OLD / name, project / "kernels" / "gdn_prefill" / name)
    subprocess.run(["git", "add", "-A", "kernels"], cwd=project, check=True)
    subprocess.run(["git", "commit", "-qm", "the old run's promotion"], cwd=project, check=True)
    return run_id


def test_old_log_reads_back_typed(project):
    run_id = _install(project)
    attempts = read_attempts(project / "runs" / "gdn_prefill" / run_id)
    assert [a.n for a in attempts] == [0, 1, 2]
    assert [a.decision.verdict for a in attempts] == ["promoted", "rejected", "promoted"]
    assert attempts[2].measurements.geomean > 1.0 and attempts[2].bench.times_us


def test_run_written_before_the_typed_record_resumes(project, op):
    run_id = _install(project)
    log = project / "runs" / "gdn_prefill" / run_id / "attempts.jsonl"
    before = log.read_text()
    store = RunStore.open(project / "runs", run_id)
    settings = OptimizeSettings.model_validate(store.read_run().settings)
    steps = [{"source": source(s, tag=f"t{i}")} for i, s in enumerate([1.2, 0.9, 1.3, 1.4, 0.95])]
    summary = run_loop(store, settings, op, ScriptedBackend(steps), FakeEvaluator(op, timing="gpu"))
    attempts = store.attempts()
    assert log.read_text().startswith(before)  # the old lines are kept as they were
    assert [a.n for a in attempts] == [0, 1, 2, 3, 4] and summary["attempts"] == 5
    assert [a.decision.verdict for a in attempts] == ["promoted", "rejected", "promoted", "promoted", "rejected"]
    # the standing chains through the old promotions' ABBA ratios into the new one
    meta = json.loads((project / "kernels/gdn_prefill/promoted.json").read_text())
    assert meta["attempt"] == 3 and abs(meta["geomean_vs_baseline"] - 1.4) < 1e-6
