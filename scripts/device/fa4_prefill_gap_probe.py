"""Where the eager-vs-graph gap of some fa4_prefill shapes comes from (device script, issue 18 point 3).

On the H200 (2026-12-03) the batched shapes P9-P12, P25 and P30 timed 51-125 µs slower eager than
under graph replay, while P1, whose host path is the same (one plan lookup, one launch straight
through the compiled kernel), showed no gap. For each shape this script times, on one set of inputs:

  - eager and graph replay as scripts/device/devtiming.py does (the L2 flushed before each call);
  - eager without the flush (does the gap need the flush kernel ahead of ours?);
  - a torch.profiler trace of the eager calls: the kernel's own device time, the idle time between
    the flush's end and our kernel's start, and the host time of the call.

If the kernel's own time matches graph replay and the idle time is the gap, the host is late; if the
kernel itself runs longer eager, the cause is on the device.

    python scripts/device/fa4_prefill_gap_probe.py [--shapes P1,P9,P11,P12,P25,P30] [--iters 30] [--impl promoted]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import bench_fa4_prefill as bp  # noqa: E402
from devtiming import bench, bench_graph  # noqa: E402


def traced(fn, iters, flush):
    """Median kernel device µs, median idle µs between the previous GPU activity's end and the
    kernel's start, and the median host µs of the call, from a torch.profiler trace."""
    from torch.profiler import ProfilerActivity, profile

    host = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            flush.zero_()
            t = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t) * 1e6)
            torch.cuda.synchronize()
    gpu = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    dur, idle = [], []
    for prev, e in zip(gpu, gpu[1:]):
        if "prefill" in e.name:
            dur.append(e.time_range.end - e.time_range.start)
            idle.append(e.time_range.start - prev.time_range.end)
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")  # noqa: E731
    return med(dur), med(idle), med(host)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="P1,P9,P11,P12,P25,P30")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--impl", default="promoted")
    args = ap.parse_args()
    mod = importlib.import_module(f"kernels.fa4_prefill.{args.impl}")
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "impl", args.impl, flush=True)
    flush = torch.empty(256 * 2**20 // 4, dtype=torch.float32, device="cuda")
    print("| shape | eager µs | graph µs | eager no flush µs | kernel µs (trace) | idle before kernel µs | host µs |")
    print("|---|---|---|---|---|---|---|")
    for sid in args.shapes.split(","):
        q_lens, prefixes, hq, hkv = bp.spec(sid)
        case = bp.make_case(q_lens, prefixes, hq, hkv, seed=1)
        fn = lambda c=case: mod.fa4_prefill(**c)  # noqa: E731
        e = bench(fn, args.iters)
        g = bench_graph(fn, args.iters)
        nf = bench(fn, args.iters, flush=False)
        k, idle, h = traced(fn, args.iters, flush)
        gs = "-" if g is None else f"{g:.1f}"
        print(f"| {sid} | {e:.1f} | {gs} | {nf:.1f} | {k:.1f} | {idle:.1f} | {h:.1f} |", flush=True)
        del case
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
