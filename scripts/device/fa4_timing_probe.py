"""Why the optimize loop's eager decode times differ from the bench script's (device script).

On the H200 (2026-12-03) `aka optimize fa4_decode` timed the TMA baseline at D2-q1 378 µs eager
while scripts/device/bench_fa4_decode.py timed the same kernel at 160 µs eager / 156 µs graph, and the loop
ranked the pointer gather 16% ahead of TMA where graph replay ranked TMA 2% ahead. The two timers
differ in three ways, each probed here on the same inputs in one process:

  - timer: the script's (events around the call) vs aka's CudaTimer (a device-wide sync inside the
    interval, so the host path and the sync's wake-up are timed too);
  - copies: one input copy every call vs two alternating copies (the loop's input rotation; every
    call then sees another cache pair, so the kernel's one-entry descriptor cache misses);
  - CONFIG: TMA (committed) vs the pointer gather (promoted).

Also the host time of one call in a hot loop for each CONFIG and copy pattern.

    python scripts/device/fa4_timing_probe.py [--shapes D2-q1,D7-q1,D2-q4] [--iters 50]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import bench_fa4_decode as dec  # noqa: E402
from devtiming import bench  # noqa: E402

from aka.evaluate.host.bench import CudaTimer, l2_bytes  # noqa: E402

CONFIGS = {"tma": {}, "gather": {"USE_TMA": False}}


def aka_median(timer, calls, iters):
    xs = [timer.measure(calls[i % len(calls)]) for i in range(iters)]
    return sorted(xs)[len(xs) // 2]


def script_median(calls, iters):
    state = {"i": 0}

    def call():
        calls[state["i"] % len(calls)]()
        state["i"] += 1

    return bench(call, iters)


def host_us(calls, n=200):
    for c in calls:
        c()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(n):
        calls[i % len(calls)]()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="D2-q1,D7-q1,D2-q4")
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    timer = CudaTimer(int(2 * l2_bytes()))
    print("| shape | CONFIG | copies | script µs | aka CudaTimer µs | host µs per call |")
    print("|---|---|---|---|---|---|")
    saved = dict(dec.mod.CONFIG)
    for sid in args.shapes.split(","):
        kv_lens, q_len, hq, hkv = dec.SHAPES[sid]
        cases = [dec.make_case(kv_lens, q_len, hq, hkv, seed=s) for s in (0, 1)]
        for name, cfg in CONFIGS.items():
            dec.mod.CONFIG.clear()
            dec.mod.CONFIG.update(saved, **cfg)
            for copies in (1, 2):
                calls = [(lambda c=c: dec.mod.fa4_decode(**c)) for c in cases[:copies]]
                s = script_median(calls, args.iters)
                a = aka_median(timer, calls, args.iters)
                h = host_us(calls)
                print(f"| {sid} | {name} | {copies} | {s:.1f} | {a:.1f} | {h:.1f} |", flush=True)
        del cases
        torch.cuda.empty_cache()
    dec.mod.CONFIG.clear()
    dec.mod.CONFIG.update(saved)


if __name__ == "__main__":
    main()
