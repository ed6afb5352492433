"""The checker's side of every timing: the entries ``bench_worker`` and ``compare_worker`` (run by
aka.evaluate.parent.runner in the checker process, which never runs a kernel) start the candidate's process,
run the harness there (aka.evaluate.host.harness) and judge what it timed in this one.

- **Timed outputs.** aka.evaluate.host.rotation keeps, per sampled implementation, shape and timing (eager,
  graph), the output of a probe call drawn among the first timed calls (and, when asked, of the last
  one). Here the inputs of that call are rebuilt from its seeds, the float64 reference is computed
  and the output must sit inside the contract's tolerance, like a gate round. A kernel that counts
  its calls, answers from a cache or detects the gate returns garbage on some timed call.
- **Speed of light.** A kernel faster than ``SUSPECT`` x the op's floor at the device's datasheet
  peaks (bf16 dense FLOP/s, HBM bandwidth, from its wiki page) did not do the work: suspect, never
  promoted. The margin covers cost models that count more FLOPs than the cleverest algorithm needs.

A rejected cell keeps its numbers under ``discarded`` and gets an ``error`` naming the reason. What the
harness returns (aka.evaluate.wire's HostBench, HostComparison) is parsed here; what these entries return
(BenchValue, Comparison) is the judged value without the timed outputs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from aka.evaluate.wire import (
    BenchCell,
    BenchPayload,
    BenchValue,
    Ceilings,
    ComparePayload,
    Comparison,
    HostBench,
    HostComparison,
    Sample,
    TaskFailure,
    TaskRequest,
    TimingPayload,
    VerifySettings,
)
from aka.hardware import datasheet_peaks

SUSPECT = 0.4  # a time below this fraction of the speed of light is not a measurement of the op
Value = TypeVar("Value", bound=BaseModel)


def run_host_task(host, task: str, payload: TimingPayload, timeout: float, kind: type[Value]) -> Value:
    """Run an aka harness in the candidate's process and parse its value as `kind`; TaskFailure with the
    stage when it cannot."""
    from aka.evaluate.checker.sandbox import HostError

    try:
        ans = host.request(TaskRequest(task=task, payload=payload.model_dump()), timeout=timeout)
    except HostError as exc:
        raise TaskFailure(exc.stage, str(exc)) from None
    if not ans.ok:
        raise TaskFailure(ans.stage or "run", ans.error)
    try:
        return kind.model_validate(ans.value)
    except ValidationError:
        raise TaskFailure("check", "the timing harness answered with malformed data") from None


def _verify_settings(payload: TimingPayload) -> VerifySettings:
    """The payload's verify settings (VerifySettings' defaults when it has none), with a seed drawn here."""
    v = payload.verify or VerifySettings()
    return v if v.seed is not None else v.model_copy(update={"seed": int.from_bytes(os.urandom(4), "little")})


def checker_ceilings(device: str, notes: list[str]) -> Ceilings | None:
    """The device's measured ceilings, calibrated (or read from the cache) in the checker's process.

    Never in the candidate's: on the H200 (2026-12-01) a red-team kernel that patched CUDA events
    made the calibration run beside it read 21,475 TB/s, and the cache kept that for every later run."""
    if device == "cpu":
        notes.append("no calibration on CPU (interpreter, not representative): no roofline fractions")
        return None
    from aka.evaluate.checker.calibrate import ceilings

    try:
        return ceilings()
    except Exception as exc:  # a failed calibration must not cost the timings
        notes.append(f"calibration failed, no roofline fractions: {type(exc).__name__}: {exc}")
        return None


def bench_worker(payload: BenchPayload) -> BenchValue:
    """The checker's entry: the timing runs in the candidate's process, the verdicts here
    (aka.evaluate.checker.verify)."""
    from aka.evaluate.checker.sandbox import new_host

    with new_host() as host:
        return bench_checked(host, payload)


def compare_worker(payload: ComparePayload) -> Comparison:
    """The checker's entry for ABBA: timed in the candidate's process, its outputs checked here."""
    from aka.evaluate.checker.sandbox import new_host

    with new_host() as host:
        return compare_checked(host, payload)


def bench_checked(host, payload: BenchPayload) -> BenchValue:
    """aka.evaluate.host.harness:bench_host in the candidate's process, then its timed outputs and times judged."""
    payload, value = bench_timed(host, payload)
    return bench_judged(host, payload, value)


def bench_timed(host, payload: BenchPayload) -> tuple[BenchPayload, HostBench]:
    """The timing half (hold the GPU's exclusive lock around this one only). The roofline ceilings are
    measured here, in the checker, and handed to the harness."""
    from aka.evaluate.checker.gate import device_of

    notes: list[str] = []
    ceil = checker_ceilings(device_of()[0], notes)
    payload = payload.model_copy(update={"verify": _verify_settings(payload), "ceilings": ceil,
                                         "ceilings_notes": notes})
    return payload, run_host_task(host, "aka.evaluate.host.harness:bench_host", payload, payload.timeout_s, HostBench)


def bench_judged(host, payload: BenchPayload, value: HostBench) -> BenchValue:
    """The judging half: references and speed-of-light floors, in this process."""
    from aka.contract.ops import get_op
    from aka.evaluate.checker.gate import device_of

    op = get_op(payload.op, None if payload.root is None else Path(payload.root))
    device, _ = device_of()
    problems = check_samples(op, value.samples, host.folder, device)
    kinds = {r.name: r.kind for r in payload.impls}
    for row in value.rows:
        case = op.cases(row.shape)[0]
        for name, cell in row.results.items():
            found = problems.get((name, row.shape))
            medians = cell.medians()
            why = expected_samples(payload.verify or VerifySettings(), name, kinds.get(name), row.shape, medians,
                                   found)
            why = why or (floor_problem(op, case, medians, device) if kinds.get(name) == "kernel" else "")
            if why:
                row.results[name] = BenchCell(error=why, rejected=True, discarded=cell)
            elif found:
                cell.verified = found["checked"]
    return value.judged()


def compare_checked(host, payload: ComparePayload) -> Comparison:
    """aka.evaluate.host.harness:compare_host there; here the candidate's (B's) timed outputs and times."""
    from aka.contract.ops import get_op
    from aka.evaluate.checker.gate import device_of
    from aka.evaluate.host.harness import compare_timing

    b = payload.b.name
    payload = payload.model_copy(update={"verify": _verify_settings(payload).model_copy(update={"impls": [b]})})
    value = run_host_task(host, "aka.evaluate.host.harness:compare_host", payload, payload.timeout_s, HostComparison)
    op = get_op(payload.op, None if payload.root is None else Path(payload.root))
    device, _ = device_of()
    problems = check_samples(op, value.samples, host.folder, device)
    for s in value.shapes:
        case = op.cases(s.shape)[0]
        medians = {compare_timing(payload, device): s.b_median_us}  # what compare_host timed
        why = expected_samples(payload.verify, b, "kernel", s.shape, medians, problems.get((b, s.shape)))
        why = why or floor_problem(op, case, medians, device)
        if why:
            raise TaskFailure("check", f"{b} on {s.shape}: {why}")
    return value.judged()


def expected_samples(verify: VerifySettings, name: str, kind: str | None, shape: str, medians: dict[str, float],
                     found: dict[str, Any] | None) -> str:
    """Why a sampled cell fails: a wrong timed output, or none came back; `medians` holds the timings the
    cell has ('eager', 'graph': median µs). Pure."""
    wanted = kind == "kernel" if verify.impls is None else name in verify.impls
    timings = set(medians)  # the kinds this cell was timed in
    if not wanted or (verify.shapes is not None and shape not in verify.shapes) or not timings:
        return ""
    if found and found["problem"]:
        return found["problem"]
    missing = sorted(timings - set((found or {}).get("timings", ())))
    return f"no timed {missing[0]} output came back to be checked" if missing else ""


def check_samples(op, samples: list[Sample], folder: Path, device: str) -> dict[tuple[str, str], dict]:
    """{(impl, shape): {"problem": '' or why, "checked": n, "timings": [...]}} for the kept timed outputs;
    one float64 reference per distinct input (probes share theirs)."""
    import torch

    from aka.evaluate.checker.gate_checks import within_tolerance
    from aka.evaluate.exchange import ExchangeError, get
    from aka.evaluate.host.rotation import rotated

    names = op.spec.output_names()
    groups: dict[tuple[str, int, int], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.shape, s.base_seed, s.seed), []).append(s)
    out: dict[tuple[str, str], dict] = {}
    for (shape, base_seed, seed), group in groups.items():
        case = op.cases(shape)[0]
        with torch.no_grad():
            ref = op.reference.reference(**rotated(op, case, base_seed, seed, device))
        ref = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
        for s in group:
            rec = out.setdefault((s.impl, shape), {"problem": "", "checked": 0, "timings": []})
            rec["timings"].append(s.timing)
            why = ""
            if len(s.outputs) != len(names):
                why = f"{len(s.outputs)} outputs came back, expected {len(names)}"
            for name, tref, r in zip(names, s.outputs, ref):
                if why:
                    break
                try:
                    t = get(tref, folder, device)
                except ExchangeError as exc:
                    why = f"{name}: {exc}"
                    break
                why = within_tolerance(name, t, r, op.spec.tolerances[name])
            rec["checked"] += 1
            if why and not rec["problem"]:
                rec["problem"] = f"timed output wrong ({s.timing} call {s.call}): {why}"
    return out


def speed_of_light_us(op, case, peaks: tuple[float, float] | None) -> float | None:
    """The op's floor on this shape at datasheet peaks, µs. Pure given the peaks."""
    if not peaks:
        return None
    return max(op.flops(case) / (peaks[0] * 1e12), op.min_bytes(case) / (peaks[1] * 1e9)) * 1e6


def below_floor(median_us: float, floor_us: float | None, label: str) -> str:
    """Pure: '' unless the time is under SUSPECT x the speed of light."""
    if floor_us is None or median_us >= SUSPECT * floor_us:
        return ""
    return (f"suspect: {label} {median_us:.2f} µs is under {SUSPECT:.0%} of this shape's speed of light "
            f"({floor_us:.2f} µs at datasheet peaks); no kernel can do the op's work that fast")


def floor_problem(op, case, medians: dict[str, float], device: str) -> str:
    """Why a kernel's times are suspect: a median ('eager', 'graph': µs) under the speed-of-light floor."""
    if device != "cuda" or not medians:
        return ""
    floor = speed_of_light_us(op, case, datasheet_peaks())
    why = below_floor(medians["eager"], floor, "eager median") if "eager" in medians else ""
    return why or (below_floor(medians["graph"], floor, "graph replay median") if "graph" in medians else "")
