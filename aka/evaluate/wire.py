"""What crosses a process boundary, in one place that every side imports: the parent (aka's own process),
the checker (the worker process, aka.evaluate.checker) and the candidate's process (aka.evaluate.host).

- the gate's payload and report (``GatePayload``, ``GateReport`` with its shapes, rounds, output checks
  and the launches a call ran): the parent sends the payload, the checker returns the report;
- ``ImplRef``: an implementation as the parent names it and the candidate's process loads it;
- how a failure reads on the way back: ``TaskFailure`` and :func:`failure` (a task that raised: its
  stage and one line), :func:`death` (a process that exited without a result);
- the candidate's process's protocol (aka.evaluate.host.main, one JSON object a line each way): the
  checker's requests (``LoadRequest``, ``CallRequest`` with its ``ExpectedOutput``, ``TaskRequest``,
  ``ExitRequest``; parsed by ``HOST_REQUEST``) and the one answer type, ``HostAnswer``;
- ``TaskResult``: what a worker writes to its result file (aka.evaluate.checker.worker) and the runner
  reads back (aka.evaluate.parent.runner);
- ``SPARE_FLAG``: the command line of a worker started ahead (aka.evaluate.parent.spares).

Every such type is built by its sender and parsed by its receiver at the boundary (``model_dump`` then
``json.dumps`` on the way out, ``json.loads`` then ``model_validate`` on the way in): inside a process
the typed object travels, never a dict.

Nothing here starts a process or imports another part of aka.evaluate.
"""

from __future__ import annotations

import inspect
import signal
import traceback
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

from aka.evaluate.exchange import TensorRef
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


# ---------------------------------------------------------------------------------------------
# the candidate's process (aka.evaluate.host.main): the checker's requests and its answers


class ExpectedOutput(BaseModel):
    """One output the checker expects a call to return (from the float64 reference)."""

    name: str = Field(description="the contract's output name")
    shape: list[int] = Field(description="the reference's shape")
    dtype: str = Field(description="torch dtype name the contract promises, e.g. bfloat16")


class LoadRequest(BaseModel):
    """Import the candidate module; its entry function must exist."""

    cmd: Literal["load"] = "load"
    kernel: str = Field(description="path of the candidate module")
    entry: str = Field(description="the contract's entry function name")


class CallRequest(BaseModel):
    """Call the candidate once on inputs from the exchange folder; its outputs go back there."""

    cmd: Literal["call"] = "call"
    device: str = Field(description="'cuda' or 'cpu': where the inputs go and the outputs must be")
    inputs: dict[str, TensorRef | None] = Field(default_factory=dict,
                                                description="tensor inputs by name, as exchange files")
    scalars: dict[str, Any] = Field(default_factory=dict,
                                    description="every other keyword argument (JSON-able): non-tensor inputs and "
                                    "the round's drawn scalars")
    expected: list[ExpectedOutput] = Field(default_factory=list, description="the outputs, in order")
    config: dict[str, JsonValue] | None = Field(None, description="CONFIG keys the shape case forces for this call")
    profile: bool = Field(False, description="list the device kernels the call ran (GPU profiler)")
    reuse_inputs: bool = Field(False, description="the previous call's inputs again (the gate's repeats): no file "
                               "reads")


class TaskRequest(BaseModel):
    """Run one of aka's own harnesses (``module:function``, module under aka.) beside the candidate."""

    cmd: Literal["task"] = "task"
    task: str = Field(description="'module:function'; the function takes the payload and returns JSON-able data")
    payload: dict[str, Any] = Field(default_factory=dict, description="the harness's JSON-able argument; the host "
                                    "adds exchange_dir")


class ExitRequest(BaseModel):
    """End the candidate's process."""

    cmd: Literal["exit"] = "exit"


HostRequest = Annotated[LoadRequest | CallRequest | TaskRequest | ExitRequest, Field(discriminator="cmd")]
HOST_REQUEST: TypeAdapter[HostRequest] = TypeAdapter(HostRequest)  # parses one request line's object


class HostAnswer(BaseModel):
    """The candidate's process's answer to one request: ``ok`` false with stage and error when it raised;
    otherwise the fields of the request's kind."""

    ok: bool = Field(description="the request was handled (a call may still carry a problem)")
    stage: str | None = Field(None, description="when not ok: where it failed (aka.evaluate.wire.STAGES)")
    error: str = Field("", description="when not ok: one line")
    problem: str = Field("", description="call: why its outputs are refused (what only the candidate's side sees)")
    launches: Launches | None = Field(None, description="call: what it ran")
    outputs: list[TensorRef] = Field(default_factory=list, description="call: the outputs, as exchange files")
    dtypes: list[str] = Field(default_factory=list, description="call: the outputs' dtype names")
    value: Any = Field(None, description="task: the harness's JSON-able return value")


class CoveragePayload(BaseModel):
    """aka.evaluate.host.coverage:host_coverage's argument, sent by the gate after a pass (``aka check``)."""

    op: str = Field(description="operator line")
    root: str = Field(description="project root holding workloads/")
    kernel: str = Field(description="path of the module the gate loaded in this process")
    ids: list[str] = Field(description="the shape ids the gate checked")
    exchange_dir: str | None = Field(None, description="set by the candidate's process (unused here)")


class CoverageAnswer(BaseModel):
    """What the full set compiles that the checked shapes never do."""

    missing: dict[str, list[str]] = Field(description="kernel or specialisation path -> the full set's shape ids "
                                          "that reach it")
    n_full: int = Field(description="how many kernels and specialisations the full set compiles")


def call_typed(fn: Callable[[Any], Any], payload: dict[str, Any]) -> Any:
    """``fn(payload)`` at a process boundary (a worker task, a harness in the candidate's process): the
    payload parsed into the model fn's first parameter is annotated with (passed as it came when that is
    no model), a model it returns dumped to JSON-able data."""
    params = list(inspect.signature(fn).parameters.values())
    kind = params[0].annotation if params else None
    if isinstance(kind, str):  # `from __future__ import annotations`: resolve it where fn was defined
        try:
            kind = eval(kind, getattr(fn, "__globals__", {}))  # noqa: S307 - aka's own annotation text
        except NameError:  # a name imported for type checking only: no model to parse into
            kind = None
    arg = kind.model_validate(payload) if isinstance(kind, type) and issubclass(kind, BaseModel) else payload
    out = fn(arg)
    return out.model_dump() if isinstance(out, BaseModel) else out


class TaskResult(BaseModel):
    """What a worker task became, as the worker writes it to its result file (aka.evaluate.checker.worker)
    and the runner reads it back (aka.evaluate.parent.runner.WorkerResult adds what the runner saw)."""

    ok: bool = Field(description="the task returned (its value may still say 'failed')")
    stage: str | None = Field(None, description="when not ok: where it failed (STAGES)")
    value: Any = Field(None, description="when ok: the task's JSON-able return value")
    error: str = Field("", description="when not ok: one line")


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


def failure(exc: BaseException) -> TaskResult:
    """The result record of a task that raised (its traceback goes to the log)."""
    traceback.print_exc()
    told = getattr(exc, "stage", None) in STAGES  # a TaskFailure's message is already the reason
    return TaskResult(ok=False, stage=classify(exc), error=str(exc)[:300] if told else one_line(exc))


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
