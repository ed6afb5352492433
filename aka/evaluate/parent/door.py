"""The one door from aka's parent process to a worker: every stage that runs a task out of process
(the loop's evaluator, `aka check`, `aka bench`, `aka regress`, `aka profile`) comes through here.

Only this module calls aka.evaluate.parent.runner.run_task (tests/test_one_door.py holds it),
so how a task is started, and how its failure reads, is decided in one place.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aka.evaluate.parent.runner import TaskPayload, WorkerResult, keep_spares, run_task
from aka.evaluate.wire import BenchPayload, ProgressLine


def run(task: str, payload: TaskPayload, *, timeout: float, interpreter: bool | None = None) -> WorkerResult:
    """task ("module:function") on payload in a fresh worker process; never raises for what the task does."""
    return run_task(task, payload, timeout=timeout, interpreter=interpreter)


def keep_ready(n: int, interpreter: bool | None) -> None:
    """Keep n workers started ahead for the tasks this door runs with that interpreter choice."""
    keep_spares(n, interpreter)


def call(task: str, payload: TaskPayload, timeout: float, interpreter: bool | None) -> tuple[bool, Any, str]:
    """(ok, value, error) of task(payload) in a fresh worker process; the error is one short line."""
    res = run(task, payload, timeout=timeout, interpreter=interpreter)
    if res.ok:
        return True, res.value, ""
    return False, None, f"{res.stage}: {res.error}"[:500]


def call_following(task: str, payload: BenchPayload, timeout: float, interpreter: bool | None,
                   on_line: Callable[[ProgressLine], None]) -> tuple[bool, Any, str]:
    """call(), with each line the task appends to payload.progress_path handed to on_line as it
    arrives (bench_worker writes one per finished shape), so a long measurement shows progress."""
    with tempfile.TemporaryDirectory(prefix=f"aka-progress-{os.getpid()}-") as tmp:
        path = Path(tmp) / "progress.jsonl"
        path.touch()
        done = threading.Event()
        seen = 0

        def follow() -> None:
            nonlocal seen
            while True:
                finished = done.is_set()  # read after this, so the last line is never missed
                lines = path.read_text().splitlines()
                for line in lines[seen:]:
                    try:
                        on_line(ProgressLine.model_validate(json.loads(line)))
                    except ValueError:  # a torn line: the task died mid-write (ValidationError is one too)
                        pass
                seen = len(lines)
                if finished:
                    return
                done.wait(0.5)

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        try:
            return call(task, payload.model_copy(update={"progress_path": str(path)}), timeout, interpreter)
        finally:
            done.set()
            t.join(5)


def failure(res: WorkerResult, who: str) -> str:
    """The one line a command prints when its worker failed: stage, error and the worker's last line."""
    tail = (res.stderr_tail or "").strip().splitlines()[-1:] or [""]
    return f"{who} worker failed at {res.stage}: {res.error} {tail[0]}".strip()
