"""Run directories: runs/<op>/<run-id>/{run.json, attempts.jsonl, candidates/<n>.py, .lock}.

attempts.jsonl is append-only; each line is one finished attempt, flushed and fsynced before the
loop moves on, so Ctrl-C, a crash or kill -9 loses at most the attempt in flight (which resume
redoes, since it never finished). A torn last line from a kill mid-write is dropped on open.
An exclusive flock on .lock keeps two processes off one run; the OS drops it when a process dies.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aka.errors import AkaError
from aka.records import Attempt, AttemptLogError, find_run, read_attempts


class RunBusyError(AkaError):
    """Another process holds the run's lock."""


def new_run_id() -> str:
    """Sortable and unique: UTC time to the second plus 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
    def create(cls, runs_root: Path, op: str, run_json: dict[str, Any]) -> RunStore:
        path = runs_root / op / new_run_id()
        path.mkdir(parents=True, exist_ok=False)
        store = cls(path)
        store.write_run({**run_json, "run_id": store.run_id, "op": op})
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
    def read_run(self) -> dict[str, Any]:
        return json.loads((self.path / "run.json").read_text())

    def write_run(self, data: dict[str, Any]) -> None:
        _atomic_write(self.path / "run.json", json.dumps(data, indent=2, default=str) + "\n")

    def update_run(self, **fields: Any) -> None:
        self.write_run({**self.read_run(), **fields})

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
        _atomic_write(path, source)
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
            info = json.loads(run_json.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        try:
            attempts = read_attempts(run_json.parent)
        except AttemptLogError:  # one damaged log must not hide the other runs; `aka runs show` says why
            attempts, info["status"] = [], "attempts.jsonl unreadable"
        rows.append(
            {
                "run_id": run_json.parent.name,
                "op": run_json.parent.parent.name,
                "started": info.get("started", ""),
                "status": info.get("status", "?"),
                "attempts": len(attempts),
                "budget": info.get("settings", {}).get("budget", {}).get("max_candidates"),
                "promoted": sum(1 for a in attempts if a.promoted),
                # no timed attempt has no best (0.0 would read as a kernel that never finishes)
                "best": max((a.score for a in attempts if a.score is not None), default=None),
                "device": info.get("device", {}).get("name", "?"),
            }
        )
    return rows
