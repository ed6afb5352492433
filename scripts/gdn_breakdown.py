#!/usr/bin/env python3
"""Per-kernel GPU time of gdn_prefill implementations, side by side (GPU, one process).

For each implementation (aka's baseline/promoted, fla, FlashQLA when importable) and shape, runs
the call a few times untimed (JIT, autotune), then --iters times under torch.profiler and prints
each device kernel's mean time per call, the kernel count per call and the sum. This answers
"where does the time go" before any tuning; the end-to-end comparison is `aka bench`.

    python3 scripts/gdn_breakdown.py [--impl promoted,fla,flashqla] [--shapes G1,G4,G5,G7] [--iters 10]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("FLA_FLASH_QLA", "0")


def _impl(name: str, inputs: dict, op):
    from aka.contract.ops import load_module

    if name in ("baseline", "promoted"):
        fn = getattr(load_module(op.path(name)), op.spec.entry)
        return lambda: fn(**inputs)
    from kernels.gdn_prefill import competitors

    return getattr(competitors, name)(inputs)


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from aka.contract.ops import get_op
    from scripts.bench_gdn_prefill import SHAPES, make_inputs

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", default="promoted,fla,flashqla")
    ap.add_argument("--shapes", default="G1,G4,G5,G7")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    op = get_op("gdn_prefill")
    for sid in args.shapes.split(","):
        hk, hv, lens, h0 = SHAPES[sid]
        inputs = make_inputs(hk, hv, lens, h0, 0, "cuda")
        inputs.pop("cu64")
        for name in args.impl.split(","):
            try:
                call = _impl(name, inputs, op)
                for _ in range(3):
                    call()
                torch.cuda.synchronize()
            except Exception as exc:  # a missing package or a failing competitor: one line, go on
                print(f"{sid} {name}: skipped ({type(exc).__name__}: {str(exc)[:160]})", flush=True)
                continue
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.iters):
                    call()
                torch.cuda.synchronize()
            per = defaultdict(lambda: [0.0, 0])
            for ev in prof.events():
                if ev.device_type == torch.autograd.DeviceType.CUDA:
                    rec = per[ev.name[:70]]
                    rec[0] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
                    rec[1] += 1
            total = sum(r[0] for r in per.values()) / args.iters
            count = sum(r[1] for r in per.values()) / args.iters
            print(f"{sid} {name}: {total:.1f} us GPU per call, {count:.0f} kernels", flush=True)
            for kname, (us, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[: args.top]:
                print(f"    {us / args.iters:9.1f} us  x{n / args.iters:4.1f}  {kname}", flush=True)


if __name__ == "__main__":
    main()
