"""Workers started ahead (aka.evaluate.parent.spares): a task takes a ready one, which still runs that task
alone and ends; a replacement starts at once; a spare that died waiting is never handed a task;
nothing outlives keep_spares(0) or the stop path."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from aka.evaluate.parent import runner, spares

T = "tests.evaluate.tasks:"


@pytest.fixture
def kept():
    yield runner.keep_spares
    runner.keep_spares(0, interpreter=False)
    runner.keep_spares(0, interpreter=True)


def _idle_pids(n: int = 1, timeout: float = 30.0) -> list[int]:
    end_at = time.monotonic() + timeout  # spares start on their own thread, asynchronously
    while spares.idle() < n and time.monotonic() < end_at:
        time.sleep(0.05)
    assert spares.idle() >= n
    return [s.proc.pid for s in spares._idle]


def _folders() -> list[str]:
    return sorted(p.name for p in Path(tempfile.gettempdir()).glob(f"aka-worker-{os.getpid()}-*"))


def test_a_task_runs_in_a_spare_alone_and_a_replacement_starts(kept):
    kept(1, interpreter=False)
    (first,) = _idle_pids()
    res = runner.run_task(T + "echo", {"a": 1}, timeout=60, interpreter=False)
    assert res.ok and res.value["echo"] == {"a": 1}
    assert res.value["pid"] == first and res.value["pgid"] == first  # its own group: a timeout kills it all
    assert "noise on stdout" in res.stderr_tail
    (second,) = _idle_pids()
    assert second != first  # the spare ran one task and ended; the next one is new
    res = runner.run_task(T + "echo", {}, timeout=60, interpreter=False)
    assert res.value["pid"] == second


def test_a_spare_outlives_the_thread_that_took_the_one_before(kept):
    """Linux kills a worker (PR_SET_PDEATHSIG) when the thread that started it ends: replacements are
    started by the spares' own thread, never by the short-lived thread whose task took a spare."""
    import threading

    kept(1, interpreter=False)
    _idle_pids()
    t = threading.Thread(target=runner.run_task, args=(T + "echo", {}), kwargs={"timeout": 60, "interpreter": False})
    t.start()
    t.join()
    (replacement,) = _idle_pids()
    time.sleep(1.0)
    res = runner.run_task(T + "echo", {}, timeout=60, interpreter=False)
    assert res.ok and res.value["pid"] == replacement


def test_a_spare_keeps_the_tasks_interpreter_choice(kept):
    kept(1, interpreter=True)
    res = runner.run_task(T + "interpreter", {}, timeout=120, interpreter=True)
    assert res.ok and res.value["interpret"] is True and res.value["shim_ok"] is True
    other = runner.run_task(T + "env", {}, timeout=60, interpreter=False)  # no spare of that choice: fresh
    assert other.ok and other.value["AKA_WORKER_INTERPRETER"] == "0"
    assert len(_idle_pids()) == 1


def test_a_timeout_in_a_spare_kills_its_group(kept, tmp_path):
    kept(1, interpreter=False)
    t0 = time.monotonic()
    res = runner.run_task(T + "hang", {"pidfile": str(tmp_path / "g.pid")}, timeout=3, interpreter=False)
    assert res.stage == "timeout" and time.monotonic() - t0 < 10
    assert runner.run_task(T + "echo", {}, timeout=60, interpreter=False).ok


def test_a_spare_that_died_waiting_is_not_handed_the_task(kept):
    kept(1, interpreter=False)
    _idle_pids()
    (dead,) = spares._idle
    os.kill(dead.proc.pid, 9)
    dead.proc.wait()
    res = runner.run_task(T + "echo", {}, timeout=60, interpreter=False)
    assert res.ok and res.value["pid"] != dead.proc.pid


def test_nothing_outlives_keep_zero_or_the_stop_path(kept):
    kept(2, interpreter=False)
    pids = _idle_pids(2)
    assert len(pids) == 2 and len(_folders()) == 2
    runner.keep_spares(0, interpreter=False)
    assert spares.idle() == 0 and _folders() == []
    assert all(not Path(f"/proc/{p}").exists() for p in pids)
    kept(1, interpreter=False)
    _idle_pids()
    killed = spares.kill_all(final=False)  # what stop_workers does (no lock, no wait), then the reap
    spares.reap_all()
    assert len(killed) == 1 and spares.idle() == 0 and _folders() == []
