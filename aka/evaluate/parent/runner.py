"""Run one task ("module:function") on a JSON payload in a fresh worker process.

Each call spawns ``python -m aka.evaluate.checker.worker`` in its own session (process group), so a candidate that
hangs, crashes, runs out of memory or faults the device fails alone: a timeout kills the whole
group, a CUDA fault dies with its process (a lost context is never reused), and the caller reads a
WorkerResult either way. The child's environment keeps only what Python, CUDA and Triton need,
minus anything that looks like a secret. The payload and the result travel through files, so what
a candidate prints cannot corrupt the result; its output is kept as ``stderr_tail``.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, JsonValue

from aka.evaluate.parent import spares
from aka.evaluate.wire import TaskResult, death

Stage = Literal["policy", "import", "compile", "run", "check", "timeout", "crash", "oom", "device-fault"]

_KEEP_EXACT = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR", "TMP", "TEMP", "TZ",
               "CC", "CXX", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "VIRTUAL_ENV", "CONDA_PREFIX"}
_KEEP_PREFIX = ("LC_", "PYTHON", "CUDA", "NVIDIA_", "NCCL_", "TRITON_", "TORCH", "PYTORCH_", "AKA_", "OMP_",
                "MKL_", "OPENBLAS_", "XDG_", "FLA_")
# Applied after the allowlist: e.g. AKA_API_KEY or TORCH_HUB_TOKEN still go.
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)
_TAIL_CHARS = 4000
# a task's payload: its model (aka.evaluate.wire), or a plain JSON object for a task that has none yet
# (aka.knowledge.profile_target's, aka.evaluate.static.offline_sm90's, the tests' own)
TaskPayload = BaseModel | dict[str, JsonValue]


class WorkerResult(BaseModel):
    """What became of one task. ``ok`` means the task returned; its value may still say 'failed'."""

    ok: bool
    stage: Stage | None = Field(None, description="where it failed; None when ok")
    value: Any = Field(None, description="the task's JSON-able return value when ok")
    error: str = Field("", description="one line: what went wrong")
    stderr_tail: str = Field("", description="last characters of the worker's stdout+stderr")
    duration_s: float = 0.0
    exit_code: int | None = None
    signal: str | None = Field(None, description="signal name when the worker died of one")


def worker_env(base: dict[str, str] | None = None, interpreter: bool | None = None) -> dict[str, str]:
    """The child's environment: an allowlist of build/runtime variables, no secrets."""
    base = dict(os.environ if base is None else base)
    env = {k: v for k, v in base.items()
           if (k in _KEEP_EXACT or k.startswith(_KEEP_PREFIX)) and not _SECRET.search(k)}
    env["AKA_WORKER_INTERPRETER"] = {None: "auto", True: "1", False: "0"}[interpreter]
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
    return env


def _package_root() -> str:
    # So `python -m aka.evaluate.checker.worker` imports this aka even without `pip install -e .` (device runs).
    return str(Path(__file__).resolve().parents[3])  # aka/evaluate/parent/runner.py -> the checkout


def run_task(task: str, payload: TaskPayload, *, timeout: float, interpreter: bool | None = None) -> WorkerResult:
    """Run ``task(payload)`` in a fresh spawned process; never raises for anything the task does.

    interpreter: True runs Triton in its CPU interpreter (with the bf16 dot shim), False never,
    None decides in the child (interpreter when it has no CUDA device).
    Raises KeyboardInterrupt, in whatever thread it runs, once this process is stopping (stop_workers):
    a worker killed on the way out is no result.
    """
    sweep_stale_folders()
    _refuse_when_stopping()
    env = worker_env(interpreter=interpreter)
    env["AKA_PARENT_PID"] = str(os.getpid())  # the worker dies with this process (aka.evaluate.lifeline)
    proc, log, d = _launch(task, payload, env)
    try:
        t0 = time.monotonic()
        with log:
            _LIVE[proc.pid] = proc
            try:
                if _stopping:  # stop_workers ran while this one started: it may have missed it
                    _kill_group(proc.pid)
                timed_out = _wait(proc, timeout)
            finally:
                del _LIVE[proc.pid]
                if proc.returncode != 0:  # killed, or it died: what it made (its exchange folder) goes too
                    remove_folders_of(proc.pid)
        _refuse_when_stopping()
        duration = time.monotonic() - t0
        tail = (d / "output.log").read_bytes()[-_TAIL_CHARS:].decode("utf-8", "replace")
        result = _read_result(d / "result.json")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    base = dict(stderr_tail=tail, duration_s=round(duration, 3), exit_code=proc.returncode)
    if timed_out:
        return WorkerResult(ok=False, stage="timeout", error=f"no result within {timeout:g} s: killed", **base)
    if result is not None:
        try:
            return WorkerResult(**TaskResult.model_validate(result).model_dump(), **base)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            return WorkerResult(ok=False, stage="crash", error=f"malformed worker result: {exc}"[:300], **base)
    return _death(proc.returncode, tail, base)


def _launch(task: str, payload: TaskPayload, env: dict[str, str]) -> tuple[subprocess.Popen, Any, Path]:
    """The worker for this task: a spare started ahead with this environment (Python, torch and the
    candidate's process up already), else a fresh one. (process, its open log, its folder)."""
    prefix = f"{WORKER_PREFIX}{os.getpid()}-"
    text = json.dumps(payload.model_dump() if isinstance(payload, BaseModel) else payload)
    spare = spares.take(env, prefix)
    if spare is not None:
        (spare.folder / "payload.json").write_text(text)
        try:
            spare.go(task, spare.folder / "payload.json", spare.folder / "result.json")
            return spare.proc, spare.log, spare.folder
        except OSError:  # it died after it was taken: the harness's loss, never the task's
            spares.end(spare)
    d = Path(tempfile.mkdtemp(prefix=prefix))
    (d / "payload.json").write_text(text)
    cmd = [sys.executable, "-m", "aka.evaluate.checker.worker", task, str(d / "payload.json"), str(d / "result.json")]
    log = open(d / "output.log", "wb")  # noqa: SIM115 - closed by run_task
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)
    return proc, log, d


def keep_spares(n: int, interpreter: bool | None = None) -> None:
    """Keep n workers started ahead for the tasks run_task starts with this interpreter choice
    (aka.evaluate.parent.spares); 0 ends the idle ones. They end with this process at the latest."""
    global _spares_armed
    env = worker_env(interpreter=interpreter)
    env["AKA_PARENT_PID"] = str(os.getpid())
    if not _spares_armed:
        _spares_armed = True
        spares.on_reaped = remove_folders_of
        atexit.register(spares.reap_all)
    spares.keep(n, env, f"{WORKER_PREFIX}{os.getpid()}-")


_spares_armed = False


# -- the workers of this process, and stopping them all ---------------------------------------------
# A command that ends on SIGTERM or SIGHUP (aka.cli.main) may have workers in several threads (the
# optimize loop prepares candidates on daemon threads); KeyboardInterrupt reaches the main thread
# only, so the others' workers are killed from here, and their folders removed on the way out.

_LIVE: dict[int, subprocess.Popen] = {}  # pid -> the workers running now, in any thread
_KILLED: set[int] = set()  # workers stop_workers killed: their folders go in remove_leftovers
_stopping = False


def _refuse_when_stopping() -> None:
    if _stopping:
        raise KeyboardInterrupt("aka is stopping")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_workers() -> None:
    """Kill every worker this process runs now, in every thread, and start no new one: the process is
    ending. Safe in a signal handler (no lock, no wait); remove_leftovers() then cleans up."""
    global _stopping
    _stopping = True
    _KILLED.update(spares.kill_all(final=True))
    for pid in list(_LIVE):
        _KILLED.add(pid)
        _kill_group(pid)


def remove_leftovers(wait_s: float = 5.0) -> None:
    """After stop_workers, on the way out: reap the killed workers (their threads may be parked) and
    remove every temporary folder of this process and of those workers."""
    stop_workers()  # also those that started since
    spares.reap_all()
    deadline = time.monotonic() + wait_s
    for proc in list(_LIVE.values()):
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            pass
    for pid in (os.getpid(), *_KILLED):
        remove_folders_of(pid)


# -- temporary folders -------------------------------------------------------------------------------
# Every temporary folder aka makes is named aka-<kind>-<pid of the process that made it>-<random>
# (aka-worker-, aka-exchange- on /dev/shm, ...), so that whoever finds one can tell whether its
# maker still runs: a killed worker's folders are removed by its runner at once, and what a killed
# run left behind by the next start (sweep_stale_folders).
_OWNED = re.compile(r"aka-[a-z]+-(\d+)-")
_LEGACY_EXCHANGE = re.compile(r"aka-exchange-[a-z0-9_]{8}$")  # made before the pid was in the name
_LEGACY_AGE_S = 24 * 3600


def temp_roots() -> list[Path]:
    """Where aka makes temporary folders: the temp folder, and /dev/shm (aka.evaluate.exchange)."""
    roots = [Path(tempfile.gettempdir())]
    shm = Path("/dev/shm")
    if shm.is_dir() and shm.resolve() != roots[0].resolve():
        roots.append(shm)
    return roots


def remove_folders_of(pid: int, roots: list[Path] | None = None) -> list[str]:
    """Remove the temporary folders process ``pid`` made (aka-<kind>-<pid>-*); call it once that
    process is gone (or is this one, on its way out)."""
    removed = []
    for base in roots or temp_roots():
        for d in base.glob(f"aka-*-{pid}-*"):
            m = _OWNED.match(d.name)
            if m and int(m.group(1)) == pid and d.is_dir():
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d.name)
    return removed


WORKER_PREFIX = "aka-worker-"
_swept = False


def sweep_stale_folders(root: str | None = None) -> list[str]:
    """Remove the temporary folders (aka-<kind>-<pid>-*, in the temp folder and /dev/shm) of aka
    processes that no longer run: what a killed run left behind. Exchange folders named before the
    pid was in the name go once a day old. Once per process unless ``root`` is given (tests)."""
    global _swept
    if _swept and root is None:
        return []
    _swept = _swept or root is None
    removed = []
    now = time.time()
    for base in [Path(root)] if root else temp_roots():
        for d in base.glob("aka-*"):
            m = _OWNED.match(d.name)
            try:
                if not d.is_dir() or d.is_symlink():
                    continue
                if m is None:
                    if not (_LEGACY_EXCHANGE.match(d.name) and now - d.stat().st_mtime > _LEGACY_AGE_S):
                        continue
                elif _alive(int(m.group(1))):
                    continue
            except OSError:
                continue
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d.name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to touch
        return True
    return True


def _wait(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait for the worker; on timeout kill its whole process group. True when it timed out."""
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:  # also on Ctrl-C (KeyboardInterrupt, re-raised): a worker must not outlive the run
        _kill_group(proc.pid)  # also reaps anything the worker left running in its group
        proc.wait()
    return timed_out


def _read_result(path: Path) -> object | None:
    """The result file's JSON (a TaskResult as aka.evaluate.checker.worker writes it); None when there is none."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _death(code: int | None, tail: str, base: dict) -> WorkerResult:
    stage, error, sig = death(code, tail)
    return WorkerResult(ok=False, stage=stage, signal=sig, error=error, **base)
