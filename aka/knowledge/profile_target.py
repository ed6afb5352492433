"""What `aka profile` runs on the GPU: the program ncu profiles, and the worker task beside it.

``python -m aka.knowledge.profile_target OP KERNEL SHAPE`` warms the kernel up (compilation, autotuning,
allocation), then brackets exactly one call with cudaProfilerStart/cudaProfilerStop, so that
``ncu --profile-from-start off`` profiles that call's launches and nothing else. It prints nothing
on stdout (ncu's own output must stay parseable).

:func:`profile_task` runs in aka.evaluate.parent.runner's worker: the same warm-up, then the kernels' compile
statistics, the torch profiler's per-kernel durations (the fallback when ncu cannot be used, and
a cross-check when it can), the roofline time of the shape, and leave-one-stage-out timings when
the kernel module offers them (a module-level ``ABLATIONS = {stage: {CONFIG overrides}}`` whose
variants skip one stage; outputs are wrong, only their times count).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

WARMUP = 2


def _setup(op_name: str, kernel: str, shape: str, root: str | None, seed: int = 0):
    """(op, case, module, call) on the GPU; raises RuntimeError with the fix when there is none."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("profiling needs a CUDA GPU: run `aka profile` on the device machine")
    from aka.contract.ops import get_op, load_module

    op = get_op(op_name, None if root is None else Path(root))
    (case,) = op.cases(shape)
    module = load_module(Path(kernel))
    fn = getattr(module, op.spec.entry, None)
    if fn is None:
        raise RuntimeError(f"{kernel} defines no function '{op.spec.entry}'")
    inputs = op.inputs.make_inputs(case, seed, "cuda")
    return op, case, module, (lambda: fn(**inputs))


def _warm(call) -> None:
    import torch

    for _ in range(WARMUP):
        call()
    torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    """The ncu target: warm up, then one call between cudaProfilerStart and cudaProfilerStop."""
    import torch

    p = argparse.ArgumentParser(prog="python -m aka.knowledge.profile_target")
    p.add_argument("op")
    p.add_argument("kernel")
    p.add_argument("shape")
    p.add_argument("--root", default=None)
    a = p.parse_args(argv)
    try:
        _, _, _, call = _setup(a.op, a.kernel, a.shape, a.root)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _warm(call)
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


def torch_profiler_kernels(call) -> list[dict[str, Any]]:
    """Per-kernel device durations of one call from torch.profiler (CUPTI), in launch order."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    rows = []
    for e in prof.events():
        if getattr(e, "device_type", None) != DeviceType.CUDA:
            continue
        rows.append({"name": e.name, "start": e.time_range.start, "duration_us": e.time_range.elapsed_us()})
    rows.sort(key=lambda r: r["start"])
    return [{"name": r["name"], "launch": i, "duration_us": float(r["duration_us"])} for i, r in enumerate(rows)]


def _median_us(call, n: int = 10) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(n):
        torch.cuda.synchronize()
        start.record()
        call()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)


def ablations(module, call) -> tuple[dict[str, float], str]:
    """Leave-one-stage-out timings, if the module has ABLATIONS and CONFIG; (times, note)."""
    table = getattr(module, "ABLATIONS", None)
    config = getattr(module, "CONFIG", None)
    if not isinstance(table, dict) or not isinstance(config, dict):
        return {}, "no leave-one-stage-out timings: the kernel module defines no ABLATIONS (stage -> CONFIG overrides)"
    original = dict(config)
    out = {"all stages": _median_us(call)}
    try:
        for stage, overrides in table.items():
            config.clear()
            config.update({**original, **overrides})  # the entry reads CONFIG at call time
            _warm(call)
            out[f"without {stage}"] = _median_us(call)
    finally:
        config.clear()
        config.update(original)
    return out, ""


def profile_task(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker task. payload: op, kernel, shape, root?, roofline? (default True), ablate? (default True)."""
    from aka.evaluate.static.compstats import collect

    op, case, module, call = _setup(payload["op"], payload["kernel"], payload["shape"], payload.get("root"))
    _warm(call)
    notes: list[str] = []
    result: dict[str, Any] = {"compile": collect(module, interpreter=False).model_dump()}
    try:
        result["torch_kernels"] = torch_profiler_kernels(call)
    except Exception as exc:  # CUPTI unavailable: the summary says so, the rest still stands
        result["torch_kernels"] = []
        notes.append(f"torch profiler failed: {type(exc).__name__}: {str(exc)[:160]}")
    if payload.get("roofline", True):
        try:
            from aka.evaluate.checker.calibrate import ceilings

            result["floor_us"] = ceilings().floor_us(op.flops(case), op.min_bytes(case))
        except Exception as exc:
            notes.append(f"no roofline: calibration failed: {type(exc).__name__}: {str(exc)[:120]}")
    if payload.get("ablate", True):
        result["ablations"], note = ablations(module, call)
        if note:
            notes.append(note)
    result["notes"] = notes
    return result


if __name__ == "__main__":
    sys.exit(main())
