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
- the timing tasks: the parent's payloads (``BenchPayload``, ``ComparePayload``, ``ScreenPayload``), the
  harness's values (``HostBench``, ``HostComparison``: the timings and the timed outputs it kept, each a
  ``Sample``) and the checker's judged ones (``BenchValue``, rows of a ``BenchCell`` per shape and
  implementation; ``Comparison``, the ABBA ratios);
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
import math
import signal
import traceback
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

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
    graphed: bool = Field(False, description="kernels only: called through aka.graphed (CUDA graphs the op keeps "
                          "per argument key), the name's '@graph' suffix, or '@bound'")
    bound: bool = Field(False, description="kernels only, with graphed: the arguments bound once (GraphedOp.bind), "
                        "so a call replays without keying them; the name's '@bound' suffix")


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
    knobs: dict[str, JsonValue] = Field(default_factory=dict, description="the contract's knobs the shape case "
                                        "sets (OpSpec.knobs): keyword arguments of the entry point")
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


# ---------------------------------------------------------------------------------------------
# the timing tasks: the parent's payloads to the checker's bench_worker, compare_worker and screen_worker
# (aka.evaluate.checker.verify, .tasks), which send them on, with the checker's additions, to the harness in
# the candidate's process (aka.evaluate.host.harness)


class Ceilings(BaseModel):
    """The two measured rates a roofline divides by (calibrated in the checker, aka.evaluate.checker.calibrate)."""

    device: str = Field(description="device name as the driver reports it")
    driver: str = Field(description="driver version the numbers were measured under")
    copy_tbps: float = Field(gt=0, description="device-to-device copy, (read + written bytes) / time, TB/s")
    gemm_tflops: float = Field(gt=0, description="bf16 GEMM rate, 2 M N K / time, TFLOP/s")

    def floor_us(self, flops: float, nbytes: float) -> float:
        """The roofline time: the larger of compute time and memory time at the measured rates."""
        return max(flops / (self.gemm_tflops * 1e12), nbytes / (self.copy_tbps * 1e12)) * 1e6


class VerifySettings(BaseModel):
    """Which timed outputs go back to the checker to be checked against the float64 reference."""

    impls: list[str] | None = Field(None, description="implementations sampled; None: every kernel (competitors "
                                    "are not the candidate's)")
    shapes: list[str] | None = Field(None, description="shape ids sampled; None: every shape")
    last: bool = Field(True, description="also the last eager call of every sampled shape, beside the probe")
    seed: int | None = Field(None, description="draws the probe calls; None: the checker draws one")


class StopRule(BaseModel):
    """When a screen stops timing (aka.evaluate.host.harness.losing): `name` runs clearly slower than
    `against`."""

    name: str = Field(description="the implementation judged (the candidate)")
    against: str = Field(description="the one it is measured against (the incumbent)")
    timing: str = Field(description="'eager' or 'graph': the medians compared")
    after: int = Field(description="shapes timed at least before the geomean rule applies")
    below: float = Field(description="stop once the geomean ratio against/name is under this")
    shape_below: float | None = Field(None, description="stop at once when one shape's ratio is under this")


class TimingPayload(BaseModel):
    """What every timing task reads (bench and compare). Extra keys are ignored: a screen's payload is
    sent on to the bench as it is."""

    model_config = ConfigDict(extra="ignore")
    op: str = Field(description="operator line, e.g. gdn_prefill")
    root: str | None = Field(None, description="project root holding workloads/ (None: aka's own)")
    shapes: str = Field("full", description="shape sets or ids, comma-separated")
    config: dict[str, JsonValue] | None = Field(None, description="aka.evaluate.host.bench.BenchConfig's fields; "
                                                "None: its defaults (for_cpu() without a GPU)")
    graph: bool | None = Field(None, description="False: no CUDA-graph timing, whatever the config says")
    time_cap_s: float | None = Field(None, description="sampling seconds per timing (`aka bench --time-cap`)")
    force_cpu: bool = Field(False, description="time on the CPU (Triton's interpreter) even with a GPU")
    seed: int = Field(0, description="base seed of the input copies")
    rank: str = Field("eager", description="the timing the op ranks on: 'eager' or 'graph'")
    verify: VerifySettings | None = Field(None, description="timed outputs sent back to be checked; the checker "
                                          "always sets it before the harness runs")
    timeout_s: float = Field(3600.0, gt=0, description="the harness's deadline in the candidate's process")
    exchange_dir: str | None = Field(None, description="set by the candidate's process: where sampled outputs go")


class BenchPayload(TimingPayload):
    """bench_worker's (and the harness's bench_host's) argument: every implementation on every shape."""

    impls: list[ImplRef] = Field(description="the implementations timed, in table order")
    first: list[str] = Field(default_factory=list, description="shapes timed first (they stopped earlier screens)")
    stop: StopRule | None = Field(None, description="a screen's early stop; None: every shape is timed")
    ceilings: Ceilings | None = Field(None, description="measured by the checker, never in the candidate's process")
    ceilings_notes: list[str] = Field(default_factory=list, description="why there are no ceilings, when not")
    progress_path: str | None = Field(None, description="a file the harness appends a ProgressLine to per shape")
    precompile: int | None = Field(None, ge=1, description="on a GPU, first compile every Triton specialisation the "
                                   "kernel implementations reach over the shapes, on this many forked children "
                                   "(aka.evaluate.precompile); None: each compiles at its first call")


class ComparePayload(TimingPayload):
    """compare_worker's (and compare_host's) argument: A against B, ABBA-interleaved."""

    a: ImplRef = Field(description="A: the incumbent")
    b: ImplRef = Field(description="B: the candidate, whose timed outputs are checked")


class ScreenPayload(BenchPayload):
    """screen_worker's argument: the small sets' gate and the timing in one candidate process."""

    kernel: str = Field(description="path of the candidate module (gated)")
    gate_shapes: str = Field(description="the sets the gate checks, comma-separated")
    rounds: int = Field(DEFAULT_ROUNDS, ge=1, description="gate rounds per shape")
    gate_above: float | None = Field(None, description="paired with the incumbent (GPU): timed first, gated only "
                                     "when its gain is above this; None: gated first")
    gpu_lock: str | None = Field(None, description="the GPU's lock file; the timing holds it exclusively")

    def gate(self) -> GatePayload:
        """The gate's payload: the candidate on the gate's sets."""
        return GatePayload(op=self.op, root=self.root or "", kernel=self.kernel, shapes=self.gate_shapes,
                           rounds=self.rounds, seed=self.seed, timeout_s=self.timeout_s)


# ---------------------------------------------------------------------------------------------
# the timing tasks' values: what the harness returns to the checker (HostBench, HostComparison: with the
# timed outputs it kept) and the checker to the parent (BenchValue, Comparison: judged, without them)


TimingKind = Literal["gpu-eager", "gpu-graph", "interpreter", "cpu"]


class Timing(BaseModel):
    """A distribution of per-call times in microseconds, labelled with how it was measured."""

    model_config = ConfigDict(frozen=True)
    kind: TimingKind
    median_us: float
    q1_us: float
    q3_us: float
    n: int
    stop: str = Field(description="why sampling stopped: converged, max_iters or time_cap")
    samples_us: list[float] = Field(default_factory=list, description="every sample, in call order")
    in_call_us: float | None = Field(
        None, description="GPU eager: median µs the host spent inside the call itself (its launches, allocations, "
        "any synchronisation), on the host's clock")
    stream_us: float | None = Field(
        None, description="GPU eager: median µs from the start event to an event recorded on the caller's stream "
        "right after the call, before the timer's device-wide sync (whose round trip median_us holds); minus the "
        "graph replay's median, the host's cost per call")

    @model_serializer(mode="wrap")
    def _drop_no_in_call(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)  # the files written before in_call_us and stream_us read and write back unchanged
        for name in ("in_call_us", "stream_us"):
            if out.get(name) is None:
                out.pop(name, None)
        return out

    @property
    def iqr_us(self) -> float:
        return self.q3_us - self.q1_us

    @property
    def rel_iqr(self) -> float:
        return self.iqr_us / self.median_us if self.median_us > 0 else math.inf


class BenchCell(BaseModel):
    """One implementation on one shape: its timings and the figures from them, or why it has none
    (skipped, error; rejected by the checker, its numbers kept under discarded).

    Its JSON holds the fields its producer set and no others (a skipped cell is ``{"skipped": why}``): the
    keys of the files ``aka bench --json`` wrote before this type, and of every cell since."""

    note: str = Field("", description="what the implementation says about its run (a competitor's dispatch path)")
    eager: Timing | None = Field(None, description="the eager calls' timing")
    tflops: float | None = Field(None, description="achieved TFLOP/s at the eager median (the op's cost model)")
    tbps: float | None = Field(None, description="achieved TB/s at the eager median (the op's minimum bytes)")
    roofline_frac: float | None = Field(None, description="roofline time / eager median; None without ceilings")
    peak_extra_bytes: int | None = Field(None, description="GPU: peak memory of one call beyond inputs and outputs")
    graph: Timing | None = Field(None, description="GPU: the CUDA-graph replays' timing")
    graph_note: str = Field("", description="why there is no graph timing, when there is none")
    verified: int | None = Field(None, description="timed outputs the checker compared with the float64 reference")
    skipped: str | None = Field(None, description="why it was not timed: not available here")
    error: str | None = Field(None, description="why it has no timing: it failed, or the checker rejected it")
    rejected: bool = Field(False, description="the checker refused its timing (error says why)")
    discarded: BenchCell | None = Field(None, description="when rejected: the cell as it was timed")

    @model_serializer(mode="wrap")
    def _set_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if k in self.model_fields_set}

    def timed(self, timing: str) -> Timing | None:
        """The timing named 'eager' or 'graph'."""
        return self.graph if timing == "graph" else self.eager

    def median(self, timing: str) -> float | None:
        """The median µs of that timing; None when it has none."""
        t = self.timed(timing)
        return t.median_us if t else None

    def medians(self) -> dict[str, float]:
        """{'eager'|'graph': median µs} of the timings it has."""
        return {k: t.median_us for k in ("eager", "graph") if (t := self.timed(k))}


class BenchRow(BaseModel):
    """One shape: its cost model, and a cell per implementation."""

    shape: str = Field(description="shape id")
    params: str = Field(description="the shape case's parameters, as it describes them")
    flops: float = Field(description="the op's floating-point operations on this shape")
    bytes: float = Field(description="the op's minimum bytes moved on this shape")
    floor_us: float | None = Field(description="roofline time at the calibrated ceilings; None without them")
    results: dict[str, BenchCell] = Field(description="implementation -> its cell, in table order")


class BenchValue(BaseModel):
    """bench_worker's value: every implementation timed on every shape, the checker's verdicts applied."""

    op: str = Field(description="operator line")
    device: str = Field(description="device name, or 'cpu (Triton interpreter)'")
    kind: Literal["gpu", "interpreter"] = Field(description="gpu, or the interpreter (its numbers rank nothing)")
    impls: list[str] = Field(description="implementation names, in table order")
    ceilings: Ceilings | None = Field(description="the checker's calibrated ceilings; None: no roofline")
    config: dict[str, JsonValue] = Field(description="aka.evaluate.host.bench.BenchConfig's fields as timed")
    notes: list[str] = Field(description="why there are no ceilings, where the timing stopped early")
    rows: list[BenchRow] = Field(description="one per shape timed, in timing order")


class Sample(BaseModel):
    """The outputs of one timed call and how to rebuild its inputs (aka.evaluate.host.rotation)."""

    impl: str
    shape: str
    timing: str = Field(description="eager or graph")
    base_seed: int
    seed: int = Field(description="the refresh seed of that call")
    call: int = Field(description="index of the timed call (in this implementation's calls)")
    outputs: list[TensorRef]


class HostBench(BenchValue):
    """bench_host's value (the candidate's process to the checker): the timings and the timed outputs kept."""

    samples: list[Sample] = Field(description="the kept timed outputs, in the exchange folder")

    def judged(self) -> BenchValue:
        """The value without the samples (the checker has read them)."""
        return BenchValue(**{k: getattr(self, k) for k in BenchValue.model_fields})


class ShapeRatio(BaseModel):
    """B against A on one shape."""

    shape: str
    ratio: float = Field(description="median over rounds of time_B / time_A")
    noise: float = Field(description="half-width of the 95% bootstrap interval of the ratio, relative")
    ci_low: float
    ci_high: float
    rounds: int
    a_median_us: float
    b_median_us: float


class Comparison(BaseModel):
    """B against A over shapes: per-shape ratios and the geomean ratio with a 95% interval (compare_worker's
    value)."""

    shapes: list[ShapeRatio]
    geomean: float
    ci_low: float
    ci_high: float
    kind: str = Field(description="timing kind of the samples; only gpu-* kinds may drive a decision")


class HostComparison(Comparison):
    """compare_host's value (the candidate's process to the checker): the comparison and B's kept outputs."""

    samples: list[Sample] = Field(description="the kept timed outputs, in the exchange folder")

    def judged(self) -> Comparison:
        """The comparison without the samples (the checker has read them)."""
        return Comparison(**{k: getattr(self, k) for k in Comparison.model_fields})


class ScreenResult(BaseModel):
    """What screen_worker returns: the gate's report (None when skipped) and the bench value."""

    gate: GateReport | None = Field(None, description="None: not gated (gate_skipped says why), or not reached")
    gate_skipped: str | None = Field(None, description="why the candidate was not gated (it cannot win)")
    bench: BenchValue | None = Field(None, description="the timing (bench_worker's value); None when the gate "
                                     "failed first")
    slow_shape: str | None = Field(None, description="with gate_skipped: the shape on which the candidate ran so "
                                   "much slower that the timing stopped")


class ProgressLine(BaseModel):
    """One line per finished shape that bench_host appends to BenchPayload.progress_path."""

    shape: str
    done: int = Field(description="shapes finished")
    total: int = Field(description="shapes to time")
    median_us: dict[str, float] = Field(default_factory=dict, description="implementation -> eager median")
    graph_us: dict[str, float] = Field(default_factory=dict, description="implementation -> graph replay median")
    interpreter: bool = False
    elapsed_s: float = 0.0
    device: str = Field("", description="the device name, as BenchValue.device")
    row: BenchRow | None = Field(None, description="the finished shape's row as timed, before the checker's "
                                 "verdicts: what `aka bench` keeps when the worker stops before the end")


# ---------------------------------------------------------------------------------------------
# the compile call (aka.evaluate.checker.tasks.compile_worker)


class CompilePayload(BaseModel):
    """compile_worker's argument: call the candidate once per shape case, untimed."""

    op: str = Field(description="operator line")
    root: str = Field(description="project root holding workloads/")
    path: str = Field(description="path of the candidate module")
    force_cpu: bool = Field(False, description="the interpreter even with a GPU")
    cases: list[str] | None = Field(None, description="this worker's share of the shape ids; None: every case")
    precompile: int | None = Field(None, description="compile every specialisation first on this many forked "
                                   "children (aka.evaluate.precompile); None: not ahead")
    gpu_lock: str | None = Field(None, description="the GPU's lock file; each call holds it shared")
    stats: bool = Field(True, description="read the compiled kernels' registers and SASS")


class Precompiled(BaseModel):
    """The precompile's record (aka.evaluate.precompile.ahead); unset fields are left out on the wire."""

    OMIT_UNSET: ClassVar[bool] = True  # wire_dump leaves None fields out, as the dicts before these types did

    specs: int = Field(description="distinct specialisations recorded")
    record_s: float = Field(description="seconds the record took")
    tainted: list[str] | None = Field(None, description="cases that raised while recorded: start over elsewhere")
    compiled: int | None = Field(None, description="specialisations compiled by the children")
    workers: int | None = Field(None, description="forked children")
    failed: list[str] | None = Field(None, description="the first compile failures")
    seconds: float | None = Field(None, description="record and compile, seconds")


class ChildCompiled(BaseModel):
    """What one forked compile child writes to its pipe."""

    compiled: int
    failed: list[str] = Field(default_factory=list, description="the first two failures, one line each")


class CapturedLaunch(BaseModel):
    """One distinct Triton launch the interpreter ran (aka.evaluate.static.offline_sm90.capture): what compiling
    it for sm_90 without a GPU needs."""

    name: str = Field(description="the kernel's name in the candidate module")
    args: dict[str, dict[str, JsonValue]] = Field(description="argument name -> {kind: value}, one kind of tensor "
                                                  "(its dtype name), int, float, bool, str, none or other (a repr)")
    options: dict[str, int] = Field(description="num_warps and num_stages where the launch passed them")


class OfflinePayload(BaseModel):
    """offline_sm90.compile_task's argument: the launches a candidate made in the interpreter."""

    path: str = Field(description="path of the candidate module")
    launches: list[CapturedLaunch] = Field(description="the launches to compile for sm_90")


class CompileResult(BaseModel):
    """compile_worker's value; unset fields are left out on the wire."""

    OMIT_UNSET: ClassVar[bool] = True

    seconds: float = Field(description="the calls' own work")
    cases: int | None = Field(None, description="cases called; None when the precompile was tainted")
    compile_stats: dict[str, JsonValue] | None = Field(None, description="aka.evaluate.static.compstats.CompileStats")
    launches: list[CapturedLaunch] = Field(default_factory=list, description="the interpreter's Triton launches")
    stats_s: float | None = Field(None, description="seconds reading the kernels' registers and SASS")
    precompile: Precompiled | None = None


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
    return wire_dump(out) if isinstance(out, BaseModel) else out


def wire_dump(model: BaseModel) -> dict[str, Any]:
    """A model as the JSON-able dict that crosses (json.dumps next): a model marked OMIT_UNSET leaves its
    None fields out, nested ones too, so readers of the files older versions wrote see the same keys."""
    return model.model_dump(exclude_none=getattr(model, "OMIT_UNSET", False))


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
