"""Resume: the store's log survives torn writes and kills; a resumed run neither loses nor repeats work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import FakeEvaluator, source

from aka.agent.llm.scripted import ScriptedBackend
from aka.records import Attempt, Decision, UnknownRunError
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.run.store import RunBusyError, RunStore, list_runs
from aka.settings import Budget, OptimizeSettings

HERE = Path(__file__).parent
DRIVER = HERE.parent / "support" / "driver.py"
NO = Decision(promote=False, verdict="rejected", reason="not faster")


def test_torn_last_line_is_dropped_and_appends_continue(tmp_path):
    store = RunStore.create(tmp_path, "op", {"settings": {}})
    store.append_attempt(Attempt(n=0, decision=NO))
    with open(store.path / "attempts.jsonl", "a") as fh:
        fh.write('{"n": 1, "deci')  # kill -9 in the middle of a write
    store.close()
    again = RunStore.open(tmp_path, store.run_id)
    assert [a.n for a in again.attempts()] == [0]
    again.append_attempt(Attempt(n=1, decision=NO))
    assert [a.n for a in again.attempts()] == [0, 1]
    with pytest.raises(RuntimeError, match="out of order"):
        again.append_attempt(Attempt(n=5))


def test_one_run_one_process_and_unique_ids(tmp_path):
    a = RunStore.create(tmp_path, "op", {})
    b = RunStore.create(tmp_path, "op", {})
    assert a.run_id != b.run_id
    with pytest.raises(RunBusyError, match="in use"):
        RunStore.open(tmp_path, a.run_id)
    a.close()
    RunStore.open(tmp_path, a.run_id).close()
    with pytest.raises(UnknownRunError, match="aka runs"):
        RunStore.open(tmp_path, "nope")
    assert {r["run_id"] for r in list_runs(tmp_path)} == {a.run_id, b.run_id}


def test_resume_in_process_continues_the_budget(project, op):
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=5), commit=False, interpreter=True)
    steps = [{"source": source(1.0 + i / 10)} for i in range(10)]
    ev = FakeEvaluator(op, timing="interpreter")
    store = prepare_run(project / "runs", settings, op, ev)
    first = Budget(max_candidates=2)
    run_loop(store, settings.model_copy(update={"budget": first}), op, ScriptedBackend(steps), ev)
    assert len(store.attempts()) == 2
    summary = run_loop(store, settings, op, ScriptedBackend(steps), ev)
    assert [a.n for a in store.attempts()] == [0, 1, 2, 3, 4]
    assert summary["attempts"] == 5
    tags = [json.loads(json.dumps(a.code_hash)) for a in store.attempts()]
    assert len(set(tags)) == 5


def _start(project: Path, steps: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1])}
    return subprocess.Popen([sys.executable, str(DRIVER), str(project), str(steps), "0.25", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_sigkill_mid_run_then_resume_loses_and_repeats_nothing(project):
    speeds = [1.0, 1.05, 1.2, 0.9, 1.3, 1.1, 1.25, 1.4]
    steps = project / "steps.json"
    steps.write_text(json.dumps([{"source": source(s, tag=f"t{i}")} for i, s in enumerate(speeds)]))
    proc = _start(project, steps)
    run_id = proc.stdout.readline().split()[1]
    log = next((project / "runs" / "gdn_prefill").glob(f"{run_id}/attempts.jsonl"), None)
    deadline = time.time() + 60
    while time.time() < deadline:
        log = project / "runs" / "gdn_prefill" / run_id / "attempts.jsonl"
        if log.exists() and len(log.read_text().splitlines()) >= 3:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = len(log.read_text().splitlines())
    assert 3 <= killed_at < len(speeds), "the kill must land mid-run"

    again = _start(project, steps, run_id)
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0, out
    attempts = [Attempt.model_validate_json(line) for line in log.read_text().splitlines()]
    assert [a.n for a in attempts] == list(range(len(speeds)))  # nothing lost, nothing twice
    assert [a.code_hash for a in attempts] == sorted({a.code_hash for a in attempts}, key=[
        a.code_hash for a in attempts].index)
    promoted = [a.n for a in attempts if a.decision.promote]
    assert promoted == [1, 2, 4, 7]  # 1.05 > 1.0, 1.2, 1.3, 1.4: each beats the incumbent by > 1%
    meta = json.loads((project / "kernels/gdn_prefill/promoted.json").read_text())
    assert meta["attempt"] == 7 and meta["run_id"] == run_id
    subjects = subprocess.run(["git", "log", "--format=%s"], cwd=project, capture_output=True, text=True).stdout
    assert subjects.count(f"run {run_id}") == 4  # one commit per promotion, none repeated


def test_promotion_interrupted_before_its_commit_is_finished_on_resume(project, op):
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=1), commit=True)
    ev = FakeEvaluator(op, timing="gpu")
    store = prepare_run(project / "runs", settings, op, ev)
    import aka.run.loop as loop

    real = loop.finish_pending_promotion
    calls = []

    def killed_before_commit(store_, settings_, op_):  # the kill lands after the log line, before git
        calls.append(1)
        if len(calls) == 2:
            promoted = [r for r in store_.attempts() if r.decision.promote]
            src = (store_.path / "candidates" / f"{promoted[-1].n}.py").read_text()
            (project / "kernels/gdn_prefill/promoted.py").write_text(src)  # written, never committed
            raise KeyboardInterrupt

    loop.finish_pending_promotion = killed_before_commit
    try:
        with pytest.raises(KeyboardInterrupt):
            run_loop(store, settings, op, ScriptedBackend([{"source": source(1.5)}]), ev)
    finally:
        loop.finish_pending_promotion = real
    assert store.attempts()[0].decision.promote
    run_loop(store, settings, op, ScriptedBackend([{"source": source(1.5)}]), ev)  # resume: budget spent
    meta = json.loads((project / "kernels/gdn_prefill/promoted.json").read_text())
    assert meta["attempt"] == 0 and store.read_run().promotions[0].commit
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True).stdout
    assert status == ""


def test_two_runs_on_one_op_at_once_stay_consistent(project):
    """Both logs complete; every promotion is one commit; the second run never promotes over the first."""
    steps = project / "steps.json"
    steps.write_text(json.dumps([{"source": source(1.0 + i / 10, tag=f"t{i}")} for i in range(1, 9)]))
    procs = [_start(project, steps) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    runs = [line.split()[1] for out in outs for line in out.splitlines() if line.startswith("run ")]
    promoted = 0
    for run_id in runs:
        log = project / "runs" / "gdn_prefill" / run_id / "attempts.jsonl"
        attempts = [Attempt.model_validate_json(line) for line in log.read_text().splitlines()]
        assert [a.n for a in attempts] == list(range(8))
        promoted += sum(a.decision.promote for a in attempts)
        # every promote decision was carried out, each with its own commit
        notes = json.loads((log.parent / "run.json").read_text()).get("promotions", [])
        assert [p["n"] for p in notes] == [a.n for a in attempts if a.decision.promote]
        assert all(p["commit"] for p in notes)
    commits = subprocess.run(["git", "log", "--format=%s", "--", "kernels/gdn_prefill/promoted.py"], cwd=project,
                             capture_output=True, text=True).stdout.splitlines()
    assert len(commits) == promoted >= 1
    status = subprocess.run(["git", "status", "--porcelain", "kernels"], cwd=project, capture_output=True,
                            text=True).stdout
    assert status == ""


def test_a_kill_while_a_promotion_is_written_leaves_the_old_files_whole(project, monkeypatch):
    """The promoted files are replaced whole: a kill before the rename leaves the previous promotion
    (committed, so not an edit), never a torn file the resumed run would take for someone's edit."""
    from aka.contract import files
    from aka.records import Promoted
    from aka.run import gitops

    first, second = source(1.2, tag="first"), source(1.3, tag="second")
    gitops.promote(project, "gdn_prefill", first, Promoted(code_hash="a"), "first", True)

    def killed(*_):
        raise KeyboardInterrupt  # the kill lands between the temporary file and its rename

    monkeypatch.setattr(files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        gitops.promote(project, "gdn_prefill", second, Promoted(code_hash="b"), "second", True)
    monkeypatch.undo()
    assert (project / "kernels" / "gdn_prefill" / "promoted.py").read_text() == first
    gitops.check_clean(project, "gdn_prefill", ours=second)  # nothing uncommitted: the resume may promote
    assert gitops.promote(project, "gdn_prefill", second, Promoted(code_hash="b"), "second", True)
    assert (project / "kernels" / "gdn_prefill" / "promoted.py").read_text() == second
