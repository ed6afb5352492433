"""`aka regress`: re-check every op's promoted kernel, for nightly CI.

The decision is :func:`classify`, a pure function of what was measured (gate results per shape,
timings per shape, the numbers recorded for this device model) and a threshold; tests drive it with
injected timings. :func:`run_regress` does the I/O through a :class:`Measurer` (the real one runs the
gate and the bench in worker processes, through aka.evaluate.parent.door) and records first measurements.

Exit codes: 0 all hold, 1 a correctness failure (it wins over 2: a wrong kernel's speed is moot),
2 a performance regression beyond the threshold.

Where first measurements go: promoted.json under ``devices.<device model>``. The numbers belong to
one promoted kernel, and promoted.json is rewritten by every promotion, so a new kernel can never be
judged against an old kernel's numbers; a per-user cache file would need its own invalidation and
would be invisible to the rest of the team. The file is written, never committed: the summary says
it changed and should be committed (until it is, each run on that model is a first measurement).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from aka.contract.shapes import gated_sets
from aka.errors import AkaError
from aka.evaluate.wire import TIMEOUT_S as GATE_TIMEOUT_S
from aka.records import DeviceRecord, Promoted
from aka.run import gitops

EXIT_OK, EXIT_CORRECTNESS, EXIT_PERFORMANCE = 0, 1, 2

GATE_ROUNDS = 2  # nightly: two rounds of fresh inputs per shape (the cached-result check needs two)


class RegressError(AkaError):
    """Bad arguments to `aka regress` (threshold, op list)."""


class OpCheck(BaseModel):
    """Everything measured for one op; the input of classify()."""

    op: str
    kernel: Literal["promoted", "baseline"] = Field(description="which kernel was checked")
    gate_shapes: list[str] = Field(description="shape ids the gate was asked to cover")
    gate: dict[str, bool] = Field(default_factory=dict, description="shape id -> passed every round")
    gate_error: str = Field("", description="why the gate failed, or failed to run")
    gate_reasons: dict[str, str] = Field(default_factory=dict, description="shape id -> why it failed")
    times_us: dict[str, float] | None = Field(None, description="shape -> median µs; None when timing was skipped")
    bench_shapes: list[str] = Field(default_factory=list, description="shape ids that should have been timed")
    baseline_us: dict[str, float] | None = Field(None, description="the baseline, timed in the same run")
    recorded_us: dict[str, float] | None = Field(None, description="promoted.json numbers for this device model")
    timing: Literal["eager", "graph"] = Field("eager", description="the timing of times_us: the op's rank_timing "
                                              "on a GPU; recorded numbers in another timing are not compared")
    skip_reason: str = Field("", description="why timing was skipped (CPU, gate failed, ...)")
    notes: list[str] = Field(default_factory=list)


class CaseResult(BaseModel):
    """One op x shape x kind; one JUnit testcase."""

    op: str
    shape: str
    kind: Literal["correctness", "performance"]
    status: Literal["pass", "fail", "skipped"]
    message: str = ""
    measured_us: float | None = None
    reference_us: float | None = None


class RegressOutcome(BaseModel):
    exit_code: int
    cases: list[CaseResult]
    first_measurement: list[str] = Field(default_factory=list, description="ops with no numbers for this device")
    notes: list[str] = Field(default_factory=list)
    threshold: float

    def failures(self, kind: str) -> list[CaseResult]:
        return [c for c in self.cases if c.kind == kind and c.status == "fail"]

    def summary(self) -> str:
        """A few lines naming the failing shapes; what CI prints."""
        verdict = {EXIT_OK: "all checks hold", EXIT_CORRECTNESS: "correctness failure",
                   EXIT_PERFORMANCE: f"performance regression beyond {self.threshold:.1%}"}[self.exit_code]
        lines = [f"aka regress: {verdict} (exit {self.exit_code})"]
        for kind in ("correctness", "performance"):
            bad = self.failures(kind)
            if bad:
                lines.append(f"  {kind} failures: " + ", ".join(f"{c.op}/{c.shape}" for c in bad))
                lines += [f"    {c.op}/{c.shape}: {c.message}" for c in bad[:12]]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def parse_threshold(text: str) -> float:
    """'5%' -> 0.05; '0.05' -> 0.05."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise RegressError(f"--threshold '{text}' is not a number; write it as 5% or 0.05") from None
    if not 0 <= value < 10:
        raise RegressError(f"--threshold '{text}' is out of range; use e.g. 5%")
    return value


def _correctness(c: OpCheck) -> list[CaseResult]:
    out = []
    for shape in c.gate_shapes:
        ok = c.gate.get(shape)
        if ok:
            out.append(CaseResult(op=c.op, shape=shape, kind="correctness", status="pass"))
            continue
        msg = (c.gate_reasons.get(shape) or "failed the gate") if ok is False else (
            f"not checked: {c.gate_error or 'no gate result'}")
        out.append(CaseResult(op=c.op, shape=shape, kind="correctness", status="fail", message=msg[:400]))
    return out


def _performance(c: OpCheck, threshold: float) -> list[CaseResult]:
    if c.times_us is None:
        return [CaseResult(op=c.op, shape=s, kind="performance", status="skipped",
                           message=c.skip_reason or "timing skipped") for s in c.bench_shapes]
    out = []
    for shape in c.bench_shapes:
        t = c.times_us.get(shape)
        rec = (c.recorded_us or {}).get(shape)
        base = (c.baseline_us or {}).get(shape) if c.kernel == "promoted" else None
        res = CaseResult(op=c.op, shape=shape, kind="performance", status="pass", measured_us=t, reference_us=rec)
        if t is None:
            res.status, res.message = "fail", "not timed (the bench failed on this shape)"
        elif rec is not None and t > rec * (1 + threshold):
            res.status, res.message = "fail", f"{t:.1f} µs is {t / rec - 1:+.1%} against the recorded {rec:.1f} µs"
        elif base is not None and t > base * (1 + threshold):
            res.status, res.message = "fail", f"{t:.1f} µs is {t / base - 1:+.1%} against the baseline's {base:.1f} µs"
        elif rec is None and c.kernel == "promoted":
            res.message = f"{t:.1f} µs: first measurement on this device model"
        else:
            res.message = f"{t:.1f} µs" + (f" ({t / rec - 1:+.1%} vs recorded)" if rec else "")
        out.append(res)
    return out


def classify(checks: list[OpCheck], threshold: float) -> RegressOutcome:
    """The verdict over all ops: exit 1 on any wrong shape, else 2 on any slow shape, else 0."""
    cases: list[CaseResult] = []
    first, notes = [], []
    for c in checks:
        cases += _correctness(c) + _performance(c, threshold)
        if c.kernel == "promoted" and c.times_us is not None and c.recorded_us is None:
            first.append(c.op)
        notes += [f"{c.op}: {n}" for n in c.notes]
    code = EXIT_OK
    if any(x.status == "fail" and x.kind == "correctness" for x in cases):
        code = EXIT_CORRECTNESS
    elif any(x.status == "fail" for x in cases):
        code = EXIT_PERFORMANCE
    return RegressOutcome(exit_code=code, cases=cases, first_measurement=first, notes=notes, threshold=threshold)


# ---------------------------------------------------------------------------------------------
# I/O: measuring, reading and recording numbers


class Measurer(Protocol):
    """Where gate results and timings come from; tests inject one, the CLI uses WorkerMeasurer."""

    def device(self) -> dict[str, Any]: ...
    def gate(self, op, kernel: Path, sets: list[str]) -> tuple[dict[str, bool], dict[str, str], str]:
        """(shape -> passed, shape -> reason of a failure, error when the gate itself failed)."""
    def bench(self, op, kernels: dict[str, Path], shapes: str) -> tuple[dict[str, dict[str, float]], str]: ...


def recorded_for(meta: Promoted | None, device: str, timing: str = "eager") -> dict[str, float] | None:
    """promoted.json's numbers for this device model in this timing (the op's rank_timing; records
    without one are eager): the promotion's own, or a recorded first measurement. Numbers in another
    timing say nothing here: a graph replay is always faster than an eager call with its host time."""
    if meta is None:
        return None
    if meta.device == device and meta.times_us and meta.timing == timing:
        return dict(meta.times_us)
    entry = meta.devices.get(device)
    if entry is not None and entry.times_us and entry.timing == timing:
        return dict(entry.times_us)
    return None


def record_first(root: Path, op: str, device: dict[str, Any], c: OpCheck) -> Path:
    """Write this device model's numbers into promoted.json (not committed: the caller says so)."""
    meta = gitops.read_promoted_meta(root, op) or Promoted()
    entry = DeviceRecord(times_us=c.times_us or {}, baseline_us=c.baseline_us, timing=c.timing,
                         measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), code_hash=meta.code_hash,
                         **{k: device.get(k) for k in ("driver", "cuda", "torch", "triton", "python")})
    meta.devices = {**meta.devices, device["name"]: entry}  # assigned, so the dump counts it as set
    return gitops.write_promoted_meta(root, op, meta)


def check_op(op, m: Measurer, device: dict[str, Any]) -> OpCheck:
    """Gate the op's kernel (promoted, else baseline), then time it beside the baseline on a GPU."""
    promoted = op.promoted_kernel()
    kernel = "promoted" if promoted is not None else "baseline"
    path = promoted or op.path("baseline")
    gpu = not device.get("interpreter")
    sets = [s.value for s in gated_sets(gpu)]
    shapes = list(dict.fromkeys(c.id for s in sets for c in op.cases(s)))
    passed, reasons, err = m.gate(op, path, sets)
    c = OpCheck(op=op.name, kernel=kernel, gate_shapes=shapes, gate=passed, gate_reasons=reasons, gate_error=err,
                bench_shapes=[x.id for x in op.cases("full")], timing=op.spec.rank_timing if gpu else "eager")
    if kernel == "baseline":
        c.notes.append("no promoted kernel: checked the baseline")
    drift = gitops.config_promotion_drift(op.root, op.name) if kernel == "promoted" else None
    if drift:
        c.notes.append(f"promoted.json: {drift}")
    if not gpu:
        c.skip_reason = "timing skipped: no GPU (gate ran in the Triton interpreter on smoke+edge)"
        return c
    if err or not all(passed.get(s) for s in shapes):
        c.skip_reason = "not timed: the gate failed"
        return c
    kernels = {"kernel": path, "baseline": op.path("baseline")} if kernel == "promoted" else {"kernel": path}
    times, berr = m.bench(op, kernels, "full")
    c.times_us = times.get("kernel", {})
    c.baseline_us = times.get("baseline") if kernel == "promoted" else None
    if berr:
        c.notes.append(f"bench: {berr[:300]}")
    if kernel == "promoted":
        meta = gitops.read_promoted_meta(op.root, op.name)
        c.recorded_us = recorded_for(meta, device["name"], c.timing)
        from aka.evaluate.parent.outcomes import code_hash

        if drift:
            c.notes.append(still_wins(c.times_us, c.baseline_us or {}))
        elif meta and meta.code_hash and meta.code_hash != code_hash(path.read_text()):
            c.notes.append(f"{path.name} differs from the code hash in promoted.json (edited by hand?)")
    return c


def still_wins(times_us: dict[str, float], baseline_us: dict[str, float]) -> str:
    """Whether a promotion kept as CONFIG values still beats baseline.py after its code changed: the
    geomean of baseline / promoted over the shapes both were timed on, in this run."""
    shared = [s for s in times_us if times_us[s] > 0 and baseline_us.get(s, 0) > 0]
    if not shared:
        return "the promoted values and the baseline were not both timed: whether they still win is unknown"
    g = math.exp(sum(math.log(baseline_us[s] / times_us[s]) for s in shared) / len(shared))
    verdict = "they still win" if g > 1 else ("they no longer win: `aka rollback` the promotion, or let `aka "
                                               "optimize` measure new values")
    return f"on the new code the promoted values run {g:.3f}x the baseline (geomean of {len(shared)} shapes): {verdict}"


def run_regress(ops: list, m: Measurer, threshold: float, record: bool = True) -> tuple[RegressOutcome, list[Path]]:
    """Check every op; record first measurements; returns the outcome and the files it changed."""
    device = m.device()
    checks = [check_op(op, m, device) for op in ops]
    changed: list[Path] = []
    outcome = classify(checks, threshold)
    by_name = {op.name: op for op in ops}
    for c in checks:
        if c.op not in outcome.first_measurement:
            continue
        complete = c.times_us and all(s in c.times_us for s in c.bench_shapes)
        if record and complete and not outcome.failures("performance"):
            changed.append(record_first(by_name[c.op].root, c.op, device, c))
    if changed:
        outcome.notes.append(f"first measurement on {device['name']} recorded in "
                             + ", ".join(str(p.relative_to(ops[0].root)) for p in changed)
                             + ": commit it so later runs compare against these numbers")
    elif outcome.first_measurement:
        outcome.notes.append(f"no numbers recorded for {device['name']} ({', '.join(outcome.first_measurement)}); "
                             + ("nothing written (--no-record)" if not record else "nothing written (incomplete)"))
    if device.get("interpreter"):
        outcome.notes.append("timing skipped: no GPU; the gate ran on the smoke and edge sets only")
    return outcome, changed


class WorkerMeasurer:
    """The real stages: aka.evaluate.checker.gate's worker and aka.evaluate.host.harness, each in a fresh process."""

    def __init__(self, timeout_s: float = GATE_TIMEOUT_S, rounds: int = GATE_ROUNDS, interpreter: bool | None = None):
        import torch

        self.timeout = timeout_s
        self.rounds = rounds
        self.interpreter = (not torch.cuda.is_available()) if interpreter is None else interpreter

    def device(self) -> dict[str, Any]:
        """The device model names the recorded numbers (same fields as the loop's run.json)."""
        from aka.hardware import device_record

        return device_record(self.interpreter)

    def gate(self, op, kernel: Path, sets: list[str]) -> tuple[dict[str, bool], dict[str, str], str]:
        from aka.evaluate.parent.check import check_kernel

        rep = check_kernel(op, kernel, shapes=",".join(sets), rounds=self.rounds, timeout=self.timeout,
                           seed=int(time.time()) % 100_000, interpreter=self.interpreter)  # fresh inputs nightly
        passed = {r.id: r.passed for r in rep.results}
        reasons = {r.id: r.reason for r in rep.results if not r.passed}
        return passed, reasons, "" if rep.passed else (rep.reason or rep.summary or "gate failed")

    def bench(self, op, kernels: dict[str, Path], shapes: str) -> tuple[dict[str, dict[str, float]], str]:
        from aka.evaluate.parent import door
        from aka.evaluate.parent.outcomes import eager_medians
        from aka.evaluate.wire import BenchPayload, BenchValue, ImplRef

        impls = [ImplRef(name=n, kind="kernel", path=str(p), function=op.spec.entry) for n, p in kernels.items()]
        # The timing the loop recorded the numbers in (the contract's rank_timing); no graph capture
        # where they are eager medians, which would double the bench time.
        rank = "eager" if self.interpreter else op.spec.rank_timing
        payload = BenchPayload(op=op.name, root=str(op.root), impls=impls, shapes=shapes, graph=rank == "graph")
        ok, value, err = door.call("aka.evaluate.checker.verify:bench_worker", payload, self.timeout, self.interpreter)
        if not ok:
            return {}, err
        # as the loop's bench records them (aka.evaluate.parent.outcomes.bench_outcome)
        times, untimed = eager_medians(BenchValue.model_validate(value), list(kernels), rank)
        return times, "; ".join(f"{n} {shape}: {r.error or r.skipped}" for n, shape, r in untimed)
