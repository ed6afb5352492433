"""What crosses a process boundary, in one place that every side imports: the parent (aka's own process),
the checker (the worker process, aka.evaluate.checker) and the candidate's process (aka.evaluate.host).

- the gate's payload and report (``GatePayload``, ``GateReport`` with its shapes, rounds, output checks
  and the launches a call ran): the parent sends the payload, the checker returns the report;
- ``ImplRef``: an implementation as the parent names it and the candidate's process loads it;
- how a failure reads on the way back: ``TaskFailure`` and :func:`failure` (a task that raised: its
  stage and one line), :func:`death` (a process that exited without a result);
- ``SPARE_FLAG``: the command line of a worker started ahead (aka.evaluate.parent.spares).

Nothing here starts a process or imports another part of aka.evaluate.
"""

from __future__ import annotations

import signal
import traceback
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from aka.settings import OptimizeSettings

DEFAULT_ROUNDS = OptimizeSettings.model_fields["gate_rounds"].default  # `aka check` gates as the loop does
# a standalone gate (`aka check`, `aka regress`): every set's rounds in one call, float64 references on full shapes
TIMEOUT_S = 600.0
SPARE_FLAG = "--spare"  # python -m aka.evaluate.checker.worker --spare: warm up, then read "task\tpayload\tresult"


class OutputCheck(BaseModel):
    name: str
    ok: bool
    reason: str = ""
    rel_l2: float | None = None
    max_abs_rel: float | None = None
    plain_rel_l2: float | None = None
    plain_max_abs_rel: float | None = None


class Launches(BaseModel):
    """One call's record (counts by name)."""

    triton: dict[str, int] = Field(default_factory=dict, description="Triton kernel name -> launches")
    torch_ops: dict[str, int] = Field(default_factory=dict, description="torch operators outside Triton launches")
    torch_compute: dict[str, int] = Field(default_factory=dict,
                                          description="of those, the ones that computed on floating-point data")
    device_kernels: dict[str, int] = Field(default_factory=dict, description="GPU: kernels the profiler saw")
    profiler: str = Field("", description="why device kernels were not listed, when they were not")


class RoundResult(BaseModel):
    round: int
    seed: int
    ok: bool
    reason: str = ""
    variant: str = Field("", description="input regime of this round (the contract's input_variants)")
    scalars: dict[str, Any] = Field(default_factory=dict, description="scalars passed (drawn), default when absent")
    warm: bool = Field(False, description="repeats the previous round's scalars and regime with fresh values")
    outputs: list[OutputCheck] = Field(default_factory=list)
    launches: Launches | None = Field(None, description="what the call ran (Triton, torch glue, device kernels)")
    seconds: float = 0.0


class ShapeResult(BaseModel):
    id: str
    params: str = ""
    passed: bool
    stage: str | None = Field(None, description="check, run or compile when the shape failed")
    reason: str = ""
    rounds: list[RoundResult] = Field(default_factory=list)

    def worst(self, name: str) -> OutputCheck | None:
        """The round check of output `name` with the largest rel L2 (a failing one first)."""
        checks = [o for r in self.rounds for o in r.outputs if o.name == name]
        return max(checks, key=lambda o: (not o.ok, o.rel_l2 if o.rel_l2 is not None else float("inf")),
                   default=None)


class GateReport(BaseModel):
    op: str
    kernel: str
    kernel_sha256: str = ""
    passed: bool
    stage: str | None = Field(None, description="policy, import, compile, run, check, timeout, crash, oom, ...")
    reason: str = ""
    device: str = ""
    interpreter: bool = False
    shapes: str = ""
    n_rounds: int = 0
    results: list[ShapeResult] = Field(default_factory=list)
    violations: list[str] = Field(default_factory=list)
    stderr_tail: str = ""
    duration_s: float = 0.0
    summary: str = ""
    coverage: list[str] = Field(default_factory=list, description="aka.evaluate.host.coverage's lines: the full "
                                "set's kernels and specialisations the checked shapes never compile")


class GatePayload(BaseModel):
    """What gate_worker reads. Extra keys (the loop's evaluator sends a few) are ignored."""

    model_config = ConfigDict(extra="ignore")
    op: str = Field(description="operator line, e.g. gdn_prefill")
    root: str = Field(description="project root holding workloads/ and kernels/")
    kernel: str = Field(description="path of the candidate module")
    shapes: str = Field("auto", description="'auto' (smoke+edge, plus full on a GPU) or sets/ids, comma-separated")
    rounds: int = Field(DEFAULT_ROUNDS, ge=1, description="rounds per shape (raised to 2 for the cache check)")
    seed: int = Field(0, description="base seed; every shape and round derives its own")
    fail_fast: bool = Field(False, description="stop at the first failing shape (the verdict is the same)")
    timeout_s: float = Field(TIMEOUT_S, gt=0, description="the gate's deadline: a call still running then is killed")
    coverage: bool = Field(False, description="after a pass, say which paths of the full set the checked "
                           "shapes never compile (aka check)")


class ImplRef(BaseModel):
    """Where one implementation lives; JSON-able so it can travel to the worker."""

    name: str = Field(description="label in tables, unique within one run")
    kind: Literal["kernel", "competitor"]
    path: str = Field(description="absolute path of the module")
    function: str = Field(description="kernel entry, or competitor factory(inputs) -> callable")
    config: dict[str, JsonValue] = Field(default_factory=dict, description="CONFIG values set (kernels only)")


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
    stage = getattr(exc, "stage", None)  # duck-typed: TaskFailure, the sandbox's HostError, any class with a stage
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


def failure(exc: BaseException) -> dict:
    """The result record of a task that raised (its traceback goes to the log)."""
    traceback.print_exc()
    told = getattr(exc, "stage", None) in STAGES  # a TaskFailure's message is already the reason
    return {"ok": False, "stage": classify(exc), "error": str(exc)[:300] if told else one_line(exc)}


def death(code: int | None, tail: str, who: str = "worker") -> tuple[str, str, str | None]:
    """(stage, one-line error, signal name) of a process that exited without a result: a signal,
    os._exit, or the OOM killer. Pure; the candidate's process (aka.evaluate.checker.sandbox) is judged the same way."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        if name == "SIGKILL":  # not ours (timeouts are handled by the caller): the kernel's OOM killer
            return "oom", f"{who} killed by SIGKILL (likely out of host memory)", name
        return "crash", f"{who} died of {name}", name
    last = tail.strip().splitlines()[-1:] or [""]
    return "crash", f"{who} exited with code {code} and no result: {last[0][:200]}", None
