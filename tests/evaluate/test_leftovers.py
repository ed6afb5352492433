"""Nothing aka makes outlives it (issue 40, item 2): every temporary folder carries its maker's pid,
so a killed worker's folders go at once and a killed run's at the next start, /dev/shm included;
and stop_workers (what SIGTERM and SIGHUP call, aka.cli.main) ends the workers of every thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from aka.evaluate import exchange
from aka.evaluate.parent import runner

TASKS = Path(__file__).parent / "lifeline_tasks"
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return not stat.read_text().rsplit(") ", 1)[-1].startswith("Z")
    except OSError:
        return False


def _wait_for(cond, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


def test_an_exchange_folder_carries_its_makers_pid():
    d = exchange.make_dir()
    try:
        assert d.name.startswith(f"aka-exchange-{os.getpid()}-")
    finally:
        exchange.remove(d)


def test_the_sweep_removes_every_kind_of_folder_of_a_dead_process_and_nothing_else(tmp_path):
    dead, live = _dead_pid(), os.getpid()
    gone = [f"aka-{kind}-{dead}-x1" for kind in ("worker", "exchange", "progress", "bench", "nvcc", "ncu")]
    gone += [f"aka-worker-{dead}-ray-y2", "aka-exchange-abcd_123"]  # a Ray worker's; one named before the pid
    kept = [f"aka-exchange-{live}-z3", f"aka-worker-{live}-z4", "aka-exchange-fresh123", "aka-notes", "akaexchange"]
    for name in gone + kept:
        (tmp_path / name).mkdir()
        (tmp_path / name / "data.bin").write_bytes(b"\0" * 16)
    old = time.time() - 2 * 24 * 3600
    os.utime(tmp_path / "aka-exchange-abcd_123", (old, old))  # a day old: no live session keeps one so long
    (tmp_path / f"aka-gpu-{dead}-0.lock").write_text("")  # a file, not a folder: kept
    assert sorted(runner.sweep_stale_folders(str(tmp_path))) == sorted(gone)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, f"aka-gpu-{dead}-0.lock"])


def test_the_sweep_looks_in_dev_shm_too():
    roots = runner.temp_roots()
    assert roots[0] == Path(tempfile.gettempdir())
    if Path("/dev/shm").is_dir():
        assert Path("/dev/shm") in roots


def test_remove_folders_of_takes_only_that_pids_folders(tmp_path):
    a = _dead_pid()
    b = a + 1
    for name in (f"aka-exchange-{a}-p", f"aka-worker-{a}-q", f"aka-exchange-{a}1-r", f"aka-exchange-{b}-s"):
        (tmp_path / name).mkdir()
    assert sorted(runner.remove_folders_of(a, [tmp_path])) == sorted([f"aka-exchange-{a}-p", f"aka-worker-{a}-q"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"aka-exchange-{a}1-r", f"aka-exchange-{b}-s"])


@linux
def test_stop_workers_ends_a_worker_of_another_thread_and_removes_its_folders(tmp_path, monkeypatch):
    # the optimize loop prepares candidates on daemon threads: SIGTERM's KeyboardInterrupt never reaches them
    monkeypatch.setattr(runner, "_stopping", False)
    monkeypatch.setattr(runner, "_KILLED", set())
    monkeypatch.setattr(runner.tempfile, "tempdir", str(tmp_path))  # this process's temp folder
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the worker's
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TASKS), os.environ.get("PYTHONPATH", "")]))
    pidfile = tmp_path / "worker.json"
    outcome: list = []

    def in_a_thread() -> None:
        try:
            outcome.append(runner.run_task("leftover_task:exchange_and_sleep", {"pidfile": str(pidfile)}, timeout=120))
        except BaseException as exc:  # noqa: BLE001 - what the thread ended with is the point
            outcome.append(exc)

    t = threading.Thread(target=in_a_thread, daemon=True)
    t.start()
    assert _wait_for(pidfile.exists, 60), "the worker never started"
    info = json.loads(pidfile.read_text())
    folder = Path(info["folder"])
    assert _alive(info["pid"]) and folder.is_dir() and list(tmp_path.glob(f"aka-worker-{os.getpid()}-*"))
    runner.stop_workers()
    t.join(10)
    assert not t.is_alive(), "run_task went on waiting for a killed worker"
    assert isinstance(outcome[0], KeyboardInterrupt), outcome  # a worker killed on the way out is no result
    assert not _alive(info["pid"])
    assert not folder.exists(), "the killed worker's exchange folder is left"
    assert not list(tmp_path.glob("aka-*")), list(tmp_path.iterdir())
    with pytest.raises(KeyboardInterrupt):  # and no new worker starts
        runner.run_task("leftover_task:exchange_and_sleep", {"pidfile": str(pidfile)}, timeout=120)
    runner.remove_leftovers(wait_s=0.1)  # what aka.cli.main calls on its way out: idempotent
