"""The optimize command group as a user runs it: real entry point, subprocess, temporary project."""

from __future__ import annotations

import os
import subprocess
import sys

from fakes import FakeEvaluator, source

from aka.agent.llm.scripted import ScriptedBackend
from aka.run import gitops
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.settings import Budget, OptimizeSettings


def aka(project, *args):
    code = "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()"
    env = {**os.environ, "AKA_ROOT": str(project), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env)


def test_user_mistakes_are_one_line_errors(project):
    r = aka(project, "show", "no-such-run")
    assert r.returncode == 1 and "unknown run 'no-such-run'" in r.stderr and "Traceback" not in r.stderr
    r = aka(project, "optimize", "gdn_prefill", "--backend", "gpt9", "--budget", "1")
    assert r.returncode == 1 and "unknown backend 'gpt9'" in r.stderr
    (project / "kernels/gdn_prefill/promoted.py").write_text("# hand edit\n")
    r = aka(project, "rollback", "gdn_prefill")
    assert r.returncode == 1 and "uncommitted edits" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_gpus_without_ray_is_a_one_line_error(project, tmp_path):
    # a `ray` that cannot be imported (the extra not installed): the flag names the extra, before any
    # baseline is measured
    (tmp_path / "noray").mkdir()
    (tmp_path / "noray" / "ray.py").write_text("raise ImportError('No module named ray')\n")
    code = ("import sys; sys.path.insert(0, sys.argv.pop(1)); from aka.cli.main import main; "
            "sys.argv = ['aka', *sys.argv[1:]]; main()")
    env = {**os.environ, "AKA_ROOT": str(project), "COLUMNS": "200"}
    for flags in (["--gpus", "2"], ["--cluster", "ray://10.0.0.1:10001"]):
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "noray"), "optimize", "gdn_prefill", *flags],
                           capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 1 and "pip install 'aka[ray]'" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not (project / "runs").exists()


def test_runs_show_history_rollback(project, op):
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=3), commit=True)
    ev = FakeEvaluator(op, timing="gpu")
    store = prepare_run(project / "runs", settings, op, ev)
    steps = [{"source": source(s)} for s in (1.2, 1.1, 1.5)]
    run_loop(store, settings, op, ScriptedBackend(steps), ev)
    store.close()
    r = aka(project, "runs")
    assert r.returncode == 0 and store.run_id in r.stdout and "finished" in r.stdout
    r = aka(project, "show", store.run_id)
    assert r.returncode == 0 and "promoted attempt 2 in commit" in r.stdout and "geomean gain" in r.stdout
    r = aka(project, "history", "gdn_prefill")
    assert r.returncode == 0 and r.stdout.count("promote attempt") == 2 and "1.500x" in r.stdout
    r = aka(project, "rollback", "gdn_prefill")
    assert r.returncode == 0 and "rolled back" in r.stdout, r.stderr
    assert "speed=1.2" in (project / "kernels/gdn_prefill/promoted.py").read_text()
    assert len(gitops.history(project, "gdn_prefill")) == 3
