"""Worker process entry: ``python -m aka.evaluate.checker.worker MODULE:FUNCTION PAYLOAD.json RESULT.json``.

Started by aka.evaluate.parent.runner in a fresh session. It selects Triton's interpreter when asked (or when no
CUDA device exists), installs the bf16 dot shim, runs the task and writes the result file. It
exits with os._exit so that a device left faulted by a candidate cannot hang interpreter teardown.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import sys

from aka.evaluate.host.interp import setup_interpreter
from aka.evaluate.wire import SPARE_FLAG, TaskResult, call_typed, failure


def run(task: str, payload: object) -> TaskResult:
    """task on the payload file's JSON object (parsed into the task's payload model, aka.evaluate.wire.call_typed)."""
    try:
        setup_interpreter(os.environ.get("AKA_WORKER_INTERPRETER", "auto"))
        module_name, _, fn_name = task.partition(":")
        fn = getattr(importlib.import_module(module_name), fn_name)
        return TaskResult(ok=True, value=call_typed(fn, payload))
    except BaseException as exc:  # the parent records it; nothing escapes the worker
        return failure(exc)


def _hosted_tasks() -> set[str]:
    from aka.evaluate.checker.sandbox import HOSTED_TASKS

    return HOSTED_TASKS


def _warm_then_wait() -> list[str]:
    """A spare's start: the candidate's process (a task that takes no Host stops it), Triton's
    interpreter choice, torch, CUDA's context and the op contracts; then the one task's line."""
    from aka.evaluate.checker.sandbox import prestart

    prestart()
    try:
        if not setup_interpreter(os.environ.get("AKA_WORKER_INTERPRETER", "auto")):
            import torch

            if torch.cuda.is_available():
                torch.zeros(1, device="cuda")  # the context now, not inside the task's first call
        import aka.contract.ops  # noqa: F401 - the contract every task loads, paid while waiting
    except Exception:  # noqa: BLE001 - the task's own run() meets the same fault and reports it
        pass

    line = sys.stdin.readline().rstrip("\n")
    parts = line.split("\t")
    if len(parts) != 3:  # the runner went away (EOF) or wrote nonsense: nothing to do
        os._exit(0)
    return parts


def main(argv: list[str]) -> None:
    faulthandler.enable()  # a segfault leaves a Python traceback in the log
    from aka.evaluate.lifeline import arm_death_signal, watch_parent

    parent = int(os.environ.get("AKA_PARENT_PID") or os.getppid())
    arm_death_signal(parent)  # killed with the runner, even by kill -9 (Linux)
    watch_parent(parent)  # and on every platform, within half a second
    if argv == [SPARE_FLAG]:  # started ahead (aka.evaluate.parent.spares): get ready, then wait for the task
        argv = _warm_then_wait()
    task, payload_path, result_path = argv
    with open(payload_path) as f:
        payload = json.load(f)
    from aka.evaluate.checker.sandbox import close_unused, prestart

    if task in _hosted_tasks():  # the candidate's process starts before this one imports torch
        prestart()
    else:  # a spare's, when this task takes none
        close_unused()
    result = run(task, payload)
    close_unused()
    try:
        text = json.dumps(result.model_dump())
    except (TypeError, ValueError) as exc:
        unsent = TaskResult(ok=False, stage="run", error=f"result is not JSON-serialisable: {exc}")
        text = json.dumps(unsent.model_dump())
    with open(result_path, "w") as f:
        f.write(text)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
