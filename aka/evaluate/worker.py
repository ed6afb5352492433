"""Worker process entry: ``python -m aka.evaluate.worker MODULE:FUNCTION PAYLOAD.json RESULT.json``.

Started by aka.evaluate.runner in a fresh session. It selects Triton's interpreter when asked (or when no
CUDA device exists), installs the bf16 dot shim, runs the task and writes the result file. It
exits with os._exit so that a device left faulted by a candidate cannot hang interpreter teardown.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import sys
import traceback

from aka.evaluate.spares import SPARE_FLAG


class TaskFailure(Exception):
    """Raised by a task to fail with a specific stage (e.g. "import" when a candidate won't load)."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


STAGES = {"policy", "import", "compile", "run", "check", "timeout", "crash", "oom", "device-fault"}
_DEVICE_FAULT = ("illegal memory access", "illegal address", "device-side assert", "unspecified launch failure",
                 "misaligned address", "cuda error", "an illegal instruction", "hardware exception")
_OOM = ("out of memory", "can't allocate memory", "cannot allocate memory")


def classify(exc: BaseException) -> str:
    """The stage an exception belongs to: oom, device-fault, compile, or run."""
    stage = getattr(exc, "stage", None)  # duck-typed: under `-m`, this module is __main__, not aka.evaluate.worker
    if isinstance(stage, str) and stage in STAGES:
        return stage
    if isinstance(exc, MemoryError):
        return "oom"
    names = {t.__name__ for t in type(exc).__mro__}
    text = str(exc).lower()
    if "OutOfMemoryError" in names or any(s in text for s in _OOM):
        return "oom"
    if "AcceleratorError" in names or any(s in text for s in _DEVICE_FAULT):
        return "device-fault"
    if names & {"CompilationError", "CompileTimeAssertionFailure", "PTXASError"}:
        return "compile"
    return "run"


def one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:limit]


def setup_interpreter(mode: str) -> bool:
    """Select the Triton interpreter per AKA_WORKER_INTERPRETER (1, 0, auto). True when selected."""
    if mode == "0":
        os.environ.pop("TRITON_INTERPRET", None)
        return False
    if mode == "auto" and os.environ.get("TRITON_INTERPRET") != "1":
        import torch

        if torch.cuda.is_available():
            return False
    from aka.evaluate.interp import enable_interpreter

    enable_interpreter()  # before any candidate module decorates a kernel
    return True


def failure(exc: BaseException) -> dict:
    """The result record of a task that raised (its traceback goes to the log)."""
    traceback.print_exc()
    told = getattr(exc, "stage", None) in STAGES  # a TaskFailure's message is already the reason
    return {"ok": False, "stage": classify(exc), "error": str(exc)[:300] if told else one_line(exc)}


def run(task: str, payload: dict) -> dict:
    try:
        setup_interpreter(os.environ.get("AKA_WORKER_INTERPRETER", "auto"))
        module_name, _, fn_name = task.partition(":")
        fn = getattr(importlib.import_module(module_name), fn_name)
        return {"ok": True, "value": fn(payload)}
    except BaseException as exc:  # the parent records it; nothing escapes the worker
        return failure(exc)


def _hosted_tasks() -> set[str]:
    from aka.evaluate.sandbox import HOSTED_TASKS

    return HOSTED_TASKS


def _warm_then_wait() -> list[str]:
    """A spare's start: the candidate's process (a task that takes no Host stops it), Triton's
    interpreter choice, torch, CUDA's context and the op contracts; then the one task's line."""
    from aka.evaluate.sandbox import prestart

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
    if argv == [SPARE_FLAG]:  # started ahead (aka.evaluate.spares): get ready, then wait for the task
        argv = _warm_then_wait()
    task, payload_path, result_path = argv
    with open(payload_path) as f:
        payload = json.load(f)
    from aka.evaluate.sandbox import close_unused, prestart

    if task in _hosted_tasks():  # the candidate's process starts before this one imports torch
        prestart()
    else:  # a spare's, when this task takes none
        close_unused()
    result = run(task, payload)
    close_unused()
    try:
        text = json.dumps(result)
    except (TypeError, ValueError) as exc:
        text = json.dumps({"ok": False, "stage": "run", "error": f"result is not JSON-serialisable: {exc}"})
    with open(result_path, "w") as f:
        f.write(text)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
