#!/usr/bin/env python3
"""Does the timing harness's per-call input refresh change what it measures? (GPU, one process.)

On the H200 (2026-12-01) `aka bench fa4_decode` read 99.6 / 76.0 / 209.8 µs (graph replay) on
D1-q1 / D7-q1 / D2-q1 where the bench script of the day (bench_fa4_decode.py, since deleted) read
62.2 / 35.8 / 166.0 µs in the same call: about +40 µs per replay since the harness refreshes the
inputs before every timed call. This times the fa4_decode baseline (or --op/--shapes) with
aka.evaluate.host.bench.time_fn, eager and graph, under
four hooks: none; aka.evaluate.host.rotation's refresh; a host-only pause of --pause-ms (the GPU idles as long as
a refresh takes); and a GPU burst of the same length (the GPU busy, the host waiting). Which of
them adds the constant says whether the cause is the refresh's GPU work, the idle gap before the
timed call (clocks), or the host path.

    python3 scripts/device/harness_overhead.py [--op fa4_decode] [--shapes D1-q1,D7-q1,D2-q1] [--pause-ms 1.5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    import torch

    from aka.contract.ops import get_op, load_module
    from aka.evaluate.host.bench import BenchConfig, CudaTimer, GraphTimer, l2_bytes, time_fn
    from aka.evaluate.host.rotation import Rotation

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--op", default="fa4_decode")
    ap.add_argument("--shapes", default="D1-q1,D7-q1,D2-q1")
    ap.add_argument("--pause-ms", type=float, default=1.5)
    args = ap.parse_args()
    op = get_op(args.op)
    fn = getattr(load_module(op.path("baseline")), op.spec.entry)
    cfg = BenchConfig(min_iters=30, max_iters=200, time_cap_s=1.5, input_copies=2)
    eager, graph = CudaTimer(int(2 * l2_bytes())), GraphTimer(int(2 * l2_bytes()))
    burst = torch.empty(64 * 2**20, device="cuda")

    def pause(i, c):
        time.sleep(args.pause_ms / 1e3)

    def gpu_burst(i, c):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.pause_ms / 1e3:
            burst.mul_(1.0)
        torch.cuda.synchronize()

    print(f"{'shape':<8} {'hooks':<10} {'eager µs':>10} {'graph µs':>10}")
    for case in op.cases(args.shapes):
        seeds = [0, 1]
        copies = [op.inputs.make_inputs(case, s, "cuda") for s in seeds]
        calls = [lambda x=x: fn(**x) for x in copies]
        replays = [graph.capture([c])[0] for c in calls]
        for label in ("none", "refresh", "pause", "gpu-burst"):
            if label == "refresh":
                rot = Rotation(op, case, copies, seeds, 7, "cuda", cfg.min_iters, set())
                hooks = rot.hooks("x", "eager")
            else:
                hooks = {"none": None, "pause": (pause, lambda i, c: None),
                         "gpu-burst": (gpu_burst, lambda i, c: None)}[label]
            e = time_fn(calls, cfg, eager, hooks=hooks)
            g = time_fn(replays, cfg, graph, hooks=hooks)
            print(f"{case.id:<8} {label:<10} {e.median_us:>10.1f} {g.median_us:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
