"""Workers die with the process that started them (issue 21): kill -9 of the parent, SIGTERM of a
command; and the folders a killed run left behind are removed at the next start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aka.evaluate.parent.runner import sweep_stale_folders

TASKS = Path(__file__).parent / "lifeline_tasks"
ROOT = Path(__file__).resolve().parents[2]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))  # a zombie is dead


def _wait_for(cond, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def _env(tmp_path):
    return {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": os.pathsep.join([str(TASKS), str(ROOT)])}


@linux
def test_kill_9_of_the_runner_takes_its_worker_and_the_next_start_sweeps_its_folder(tmp_path):
    pidfile = tmp_path / "worker.pid"
    code = ("from aka.evaluate.parent.runner import run_task; "
            f"run_task('lifeline_task:sleep', {{'pidfile': {str(pidfile)!r}}}, timeout=120)")
    parent = subprocess.Popen([sys.executable, "-c", code], env=_env(tmp_path))
    try:
        assert _wait_for(pidfile.exists, 60), "the worker never started"
        worker = int(pidfile.read_text())
        assert _alive(worker)
        parent.kill()  # SIGKILL: no finally, no handler runs in the parent
        parent.wait()
        assert _wait_for(lambda: not _alive(worker), 5), "the worker outlived its parent"
    finally:
        parent.kill()
    left = [d.name for d in tmp_path.glob("aka-worker-*")]
    assert left and all(name.startswith(f"aka-worker-{parent.pid}-") for name in left)  # what kill -9 leaves
    live = tmp_path / f"aka-worker-{os.getpid()}-keep"
    live.mkdir()  # a running process's folder is never touched
    assert sweep_stale_folders(str(tmp_path)) == left
    assert not list(tmp_path.glob(f"aka-worker-{parent.pid}-*")) and live.exists()


@linux
def test_sigterm_ends_a_command_like_ctrl_c_and_takes_its_worker(tmp_path):
    # `aka check` on CPU runs its gate in a worker for several seconds: SIGTERM it mid-way
    cmd = [sys.executable, "-c", "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()",
           "check", "gdn_prefill", "--shapes", "S1", "--rounds", "2"]
    proc = subprocess.Popen(cmd, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def workers():
        found = []
        for d in Path("/proc").iterdir():
            try:
                line = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if d.name.isdigit() and "aka.evaluate.checker.worker" in line and str(tmp_path) in line:
                found.append(int(d.name))
        return found

    try:
        assert _wait_for(lambda: bool(workers()), 60), "no worker started"
        started = workers()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode != 0 and "Traceback" not in out, out[-2000:]
    assert _wait_for(lambda: not any(_alive(p) for p in started), 5), "a worker outlived the command"
