"""The checker's handle on the candidate's process (aka.evaluate.host.main): start it, ask it, kill it.

The candidate never runs in the process that computes references and verdicts. The checker starts
``python -m aka.evaluate.host.main`` in a session of its own, with the same sanitised environment the checker got
from aka.evaluate.parent.runner, talks to it over two pipes (one JSON object per line, nothing unpickled) and moves
tensors through an exchange folder (aka.evaluate.exchange). A request that takes longer than its timeout,
a process that dies or answers garbage, ends the host; the error says which and why, with the
host's log tail, so the gate can record the stage (timeout, crash, oom, device-fault).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from aka.evaluate import exchange
from aka.evaluate.exchange import TensorRef
from aka.evaluate.wire import ExitRequest, HostAnswer, HostRequest, death

_TAIL = 4000
# worker tasks that judge a candidate through a Host: aka.evaluate.checker.worker starts theirs before it imports torch
HOSTED_TASKS = {"aka.evaluate.checker.gate:gate_worker", "aka.evaluate.checker.tasks:screen_worker",
                "aka.evaluate.checker.verify:bench_worker", "aka.evaluate.checker.verify:compare_worker"}
_PRESTARTED: list[Host] = []


def prestart() -> None:
    """Start this process's Host now (its imports then overlap the checker's own); once."""
    if not _PRESTARTED:
        _PRESTARTED.append(Host())


def new_host() -> Host:
    """The prestarted Host when there is one, else a fresh one."""
    return _PRESTARTED.pop() if _PRESTARTED else Host()


def close_unused() -> None:
    """Stop a prestarted Host the task never took (it failed first): no process or folder left behind."""
    while _PRESTARTED:
        _PRESTARTED.pop().close()


class HostError(Exception):
    """The host could not answer: ``stage`` is where that leaves the candidate."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


class Host:
    """One candidate process. Use as a context manager; every exit path kills its process group."""

    def __init__(self, start_timeout: float = 120.0):
        self.folder = exchange.make_dir()
        self._log = open(self.folder / "host.log", "wb")  # noqa: SIM115 - closed in close()
        req_r, self._req_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        cmd = [sys.executable, "-m", "aka.evaluate.host.main", str(req_r), str(resp_w), str(self.folder),
               str(os.getpid())]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     pass_fds=(req_r, resp_w), start_new_session=True, env=dict(os.environ))
        os.close(req_r)
        os.close(resp_w)
        self._buf = b""
        self.dead: HostError | None = None
        self.start_timeout = start_timeout

    # ------------------------------------------------------------------------------------------
    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def request(self, msg: HostRequest, timeout: float) -> HostAnswer:
        """Send one request and wait for its answer; HostError when none comes."""
        if self.dead is not None:
            raise self.dead
        try:
            os.write(self._req_w, (json.dumps(msg.model_dump()) + "\n").encode())
        except OSError:  # BrokenPipeError: it died before reading
            self._fail(self._death())
        line = self._read_line(timeout)
        try:
            raw = json.loads(line)
        except ValueError:
            self._fail(HostError("crash", "the candidate's process answered with malformed data "
                                          "(it wrote to the control channel)"))
        try:
            ans = HostAnswer.model_validate(raw)
        except ValidationError:
            self._fail(HostError("crash", "the candidate's process answered with malformed data"))
        if not ans.ok and ans.stage in ("oom", "device-fault"):
            self.dead = HostError(ans.stage, ans.error[:300])
        return ans

    def _read_line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                self._fail(HostError("timeout", f"no result within {timeout:g} s: killed"))
            ready, _, _ = select.select([self._resp_r], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._resp_r, 1 << 20)
            if not chunk:  # EOF: the process is gone
                self._fail(self._death())
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _death(self) -> HostError:
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._kill()
            code = self.proc.wait()
        stage, error, _ = death(code, self.log_tail(), who="the candidate's process")
        return HostError(stage, error)

    def _fail(self, err: HostError) -> None:
        self.dead = err
        self._kill()
        raise err

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self) -> str:
        try:
            self._log.flush()
            data = (self.folder / "host.log").read_bytes()
        except OSError:
            return ""
        return data[-_TAIL:].decode("utf-8", "replace")

    def close(self) -> str:
        """Stop the process (politely, then by force) and remove the exchange folder; returns the log tail."""
        if self.proc.poll() is None and self.dead is None:
            try:
                os.write(self._req_w, (json.dumps(ExitRequest().model_dump()) + "\n").encode())
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        self.proc.wait()
        tail = self.log_tail()
        for fd in (self._req_w, self._resp_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        exchange.remove(self.folder)
        return tail


def write_inputs(folder: Path, inputs: dict[str, Any], tag: str = "in") -> tuple[dict[str, TensorRef], dict[str, Any]]:
    """Tensors to exchange files, everything else as JSON scalars: (tensor refs, scalars)."""
    import torch

    refs: dict[str, TensorRef] = {}
    scalars: dict[str, Any] = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor):
            refs[k] = exchange.put(v, folder, f"{tag}_{k}.bin")
        else:
            scalars[k] = v
    return refs, scalars
