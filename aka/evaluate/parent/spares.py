"""Worker processes started ahead of their task: Python, torch, CUDA and the candidate's process
(aka.evaluate.checker.sandbox) are ready when a task arrives, so a task pays none of their start.

On the H200 (2026-12-03) every worker call began with ~8 s of process start (the checker and the
candidate's process each importing torch and initialising CUDA), a third of a candidate's screen
and a fifth of its compile workers' time. A spare is still one process per task: it is taken by
exactly one task, then ends as any worker does, so a candidate that faults the device or hangs
takes no later task with it. aka.evaluate.parent.runner takes a spare whose environment matches the task's
and starts a replacement at once. Off by default (keep(0)); `aka optimize` on a GPU keeps
``OptimizeSettings.spare_workers``; the CPU suite tests them in the interpreter.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from aka.evaluate.wire import SPARE_FLAG


@dataclass
class Spare:
    """A started worker waiting for its one task."""

    proc: subprocess.Popen
    folder: Path  # aka-worker-<this pid>-*: payload, result and the output log
    log: IO[bytes]
    env_key: tuple

    def go(self, task: str, payload: Path, result: Path) -> None:
        """Hand it its task (one line on its stdin, then EOF)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{task}\t{payload}\t{result}\n".encode())
        self.proc.stdin.close()


_lock = threading.Lock()
_idle: list[Spare] = []
_count = 0
_stopped = False


def key(env: dict[str, str]) -> tuple:
    return tuple(sorted(env.items()))


def start(env: dict[str, str], prefix: str) -> Spare:
    """A worker started now that will wait on its stdin for a task."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    log = open(folder / "output.log", "wb")  # noqa: SIM115 - closed by the runner once the task ends
    proc = subprocess.Popen([sys.executable, "-m", "aka.evaluate.checker.worker", SPARE_FLAG], stdin=subprocess.PIPE,
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Spare(proc, folder, log, key(env))


def keep(n: int, env: dict[str, str], prefix: str) -> None:
    """Keep n spares for tasks started with this environment (0: none; idle ones end)."""
    global _count, _stopped
    with _lock:
        _count = max(0, n)
        _stopped = False  # asked for again after a stop (tests): start them again
        _wanted.clear()  # spares for this environment only
        extra = [s for s in _idle if s.env_key != key(env)] + [s for s in _idle if s.env_key == key(env)][_count:]
        for s in extra:
            _idle.remove(s)
    for s in extra:
        end(s)
    top_up(env, prefix)


def take(env: dict[str, str], prefix: str) -> Spare | None:
    """An idle spare started with exactly this environment (a replacement starts at once), or None."""
    with _lock:
        found = next((s for s in _idle if s.env_key == key(env) and s.proc.poll() is None), None)
        dead = [s for s in _idle if s.proc.poll() is not None]
        for s in [*dead, *([found] if found else [])]:
            _idle.remove(s)
    for s in dead:  # died while waiting (its start failed): the task gets a fresh worker instead
        end(s)
    if found is not None:
        top_up(env, prefix)
    return found


def top_up(env: dict[str, str], prefix: str) -> None:
    """Ask the starter thread for the spares this environment lacks (asynchronous).

    One long-lived thread starts every spare: a worker arms PR_SET_PDEATHSIG (aka.evaluate.lifeline),
    which Linux fires when the *thread* that started it ends, and the tasks that take spares run on
    short-lived threads (the loop's compile workers). On the H200 (2026-12-04) a spare started from such
    a thread was killed by SIGKILL the moment its starter's compile ended."""
    global _starter
    with _lock:
        _wanted[key(env)] = (env, prefix)
        if _starter is None:
            _starter = threading.Thread(target=_start_wanted, name="aka-spares", daemon=True)
            _starter.start()
    _wake.set()


_wanted: dict[tuple, tuple[dict[str, str], str]] = {}
_wake = threading.Event()
_starter: threading.Thread | None = None


def _start_wanted() -> None:
    while True:
        _wake.wait()
        _wake.clear()
        for env, prefix in list(_wanted.values()):
            while True:
                with _lock:
                    if _stopped or sum(s.env_key == key(env) for s in _idle) >= _count:
                        break
                s = start(env, prefix)
                with _lock:  # keep(0) or stop may have come while it started
                    wanted = not _stopped and sum(x.env_key == s.env_key for x in _idle) < _count
                    if wanted:
                        _idle.append(s)
                if not wanted:
                    end(s)
                    break


def end(s: Spare) -> None:
    """Kill an idle spare's process group and remove its folders (its candidate process, in a session
    of its own, follows its parent within half a second: aka.evaluate.lifeline)."""
    _kill(s)
    _reap(s)


def _kill(s: Spare) -> None:
    try:
        os.killpg(s.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(s: Spare) -> None:
    s.proc.wait()
    s.log.close()
    shutil.rmtree(s.folder, ignore_errors=True)
    on_reaped(s.proc.pid)  # the exchange folder of the candidate process it had started


def _nothing(pid: int) -> None:
    pass


on_reaped: Callable[[int], None] = _nothing  # set by aka.evaluate.parent.runner: remove what that pid made


def kill_all(final: bool) -> list[int]:
    """Kill every idle spare: no lock, no wait (safe in a signal handler); with final, start no more.
    reap_all() then waits for them and removes their folders. Returns their pids."""
    global _stopped
    _stopped = _stopped or final
    gone = list(_idle)
    for s in gone:
        _kill(s)
    return [s.proc.pid for s in gone]


def reap_all() -> None:
    with _lock:
        gone = list(_idle)
        _idle.clear()
    for s in gone:
        _kill(s)
        _reap(s)


def idle() -> int:
    with _lock:
        return len(_idle)
