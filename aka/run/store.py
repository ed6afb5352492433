"""Run directories: runs/<op>/<run-id>/{run.json, attempts.jsonl, candidates/<n>.py, .lock}.

attempts.jsonl is append-only; each line is one finished attempt, flushed and fsynced before the
loop moves on, so Ctrl-C, a crash or kill -9 loses at most the attempt in flight (which resume
redoes, since it never finished). A torn last line from a kill mid-write is dropped on open.
An exclusive flock on .lock keeps two processes off one run; the OS drops it when a process dies.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from aka.contract.files import write_atomic
from aka.errors import AkaError
from aka.records import Attempt, AttemptLogError, RunRecord, RunRecordError, find_run, read_attempts, read_run_record


class RunBusyError(AkaError):
    """Another process holds the run's lock."""


def new_run_id() -> str:
    """Sortable and unique: UTC time to the second plus 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class RunStore:
    """One run directory, locked for the lifetime of this object (close() or process exit frees it)."""

    def __init__(self, path: Path):
        self.path = path
        self.run_id = path.name
        self.op = path.parent.name
        (path / "candidates").mkdir(parents=True, exist_ok=True)
        self._lock = open(path / ".lock", "a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise RunBusyError(
                f"run {self.run_id} is in use by another aka process; wait for it or pick another run"
            ) from None
        self._repair_tail()

    @classmethod
    def create(cls, runs_root: Path, op: str, fields: dict[str, Any] | None = None) -> RunStore:
        path = runs_root / op / new_run_id()
        path.mkdir(parents=True, exist_ok=False)
        store = cls(path)
        data = to_jsonable_python({**(fields or {}), "run_id": store.run_id, "op": op}, fallback=str)
        store.write_run(RunRecord.model_validate(data))
        return store

    @classmethod
    def open(cls, runs_root: Path, run_id: str) -> RunStore:
        return cls(find_run(runs_root, run_id))

    def close(self) -> None:
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    @contextmanager
    def op_lock(self):
        """Exclusive across every run of this op: promotion checks and commits happen one at a time."""
        with open(self.path.parent / ".promote.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # -- run.json
    def read_run(self) -> RunRecord:
        return read_run_record(self.path)

    def write_run(self, record: RunRecord) -> None:
        write_atomic(self.path / "run.json", record.to_json(), durable=True)

    def update_run(self, **fields: Any) -> None:
        """Set top-level fields of run.json (records or their JSON form), validated as RunRecord."""
        now = self.read_run().model_dump(mode="json", exclude_unset=True)
        new = {k: v.model_dump(mode="json", exclude_unset=True) if isinstance(v, BaseModel)
               else to_jsonable_python(v, fallback=str) for k, v in fields.items()}
        self.write_run(RunRecord.model_validate({**now, **new}))

    # -- attempts
    def attempts(self) -> list[Attempt]:
        return read_attempts(self.path)

    def append_attempt(self, record: Attempt) -> None:
        expected = len(self.attempts())
        if record.n != expected:
            raise RuntimeError(f"attempt {record.n} out of order: the log holds {expected}")
        line = record.to_json() + "\n"
        with open(self.path / "attempts.jsonl", "a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def write_candidate(self, n: int | str, source: str) -> Path:
        path = self.path / "candidates" / f"{n}.py"
        write_atomic(path, source, durable=True)
        return path

    def _repair_tail(self) -> None:
        """Drop a torn last line (kill -9 during a write) so the next append starts on a clean line."""
        log = self.path / "attempts.jsonl"
        if not log.exists():
            return
        data = log.read_bytes()
        good = data[: data.rfind(b"\n") + 1] if data else b""
        if good != data:
            with open(log, "r+b") as fh:
                fh.truncate(len(good))
                os.fsync(fh.fileno())


def cache_dir(runs_root: Path, op_name: str) -> Path:
    """What runs of an op measure for later runs on the same machine (aka.run.deferred): beside the runs."""
    return runs_root / op_name / ".cache"


def list_runs(runs_root: Path, op: str | None = None) -> list[dict[str, Any]]:
    """Summaries of every run (newest first): id, op, status, attempts, best, promoted."""
    rows = []
    for run_json in sorted(runs_root.glob(f"{op or '*'}/*/run.json"), reverse=True):
        try:
            info = read_run_record(run_json.parent)
        except RunRecordError:
            continue
        try:
            attempts = read_attempts(run_json.parent)
        except AttemptLogError:  # one damaged log must not hide the other runs; `aka runs show` says why
            attempts, info.status = [], "attempts.jsonl unreadable"
        rows.append(
            {
                "run_id": run_json.parent.name,
                "op": run_json.parent.parent.name,
                "started": info.started,
                "status": info.status or "?",
                "attempts": len(attempts),
                "budget": (info.settings.get("budget") or {}).get("max_candidates"),
                "promoted": sum(1 for a in attempts if a.promoted),
                # no timed attempt has no best (0.0 would read as a kernel that never finishes)
                "best": max((a.score for a in attempts if a.score is not None), default=None),
                "device": info.device.name,
            }
        )
    return rows
