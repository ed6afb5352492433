#!/usr/bin/env python3
"""Per-kernel GPU time of gdn_prefill implementations, side by side (GPU, one process).

For each implementation (aka's baseline/promoted, fla, FlashQLA when importable) and shape, runs
the call a few times untimed (JIT, autotune), then --iters times under torch.profiler and prints
each device kernel's mean time per call, the kernel count per call and the sum. This answers
"where does the time go" before any tuning; the end-to-end comparison is `aka bench`.

    python3 scripts/device/gdn_breakdown.py [--impl promoted,fla,flashqla] [--shapes G1,G4,G5,G7] [--iters 10]
    python3 scripts/device/gdn_breakdown.py --ncu [--impl baseline,flashqla] [--shapes G1]

--ncu: Nsight Compute instead of the torch profiler: each (shape, implementation) in a process of its
own under ncu (aka.knowledge.ncu_report's metrics, clocks left alone), one call profiled after three
untimed ones; per kernel its duration, DRAM and SM throughput, occupancy, registers and top stalls.
ncu serialises and replays each kernel, so its durations are each kernel alone with a cold-ish cache.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("FLA_FLASH_QLA", "0")


def _impl(name: str, inputs: dict, op):
    from aka.contract.ops import load_module

    if name in ("baseline", "promoted"):
        fn = getattr(load_module(op.path(name)), op.spec.entry)
        return lambda: fn(**inputs)
    from kernels.gdn_prefill import competitors

    return getattr(competitors, name)(inputs)


def _inputs(op, sid: str) -> dict:
    """The contract's full-set case ``sid`` (G1..G10), its inputs on the GPU (seed 0)."""
    case = next((c for c in op.cases("full") if c.id == sid), None)
    if case is None:
        sys.exit(f"gdn_breakdown: no full-set case {sid!r}; the contract has {[c.id for c in op.cases('full')]}")
    return op.inputs.make_inputs(case, 0, "cuda")


def _ncu_child(name: str, sid: str) -> None:
    """What ncu profiles: three untimed calls, then one between cudaProfilerStart/Stop."""
    import torch

    from aka.contract.ops import get_op

    op = get_op("gdn_prefill")
    call = _impl(name, _inputs(op, sid), op)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def _ncu(impls: list[str], shapes: list[str]) -> None:
    import subprocess
    import tempfile

    from aka.knowledge.ncu_report import ncu_collect_cmd, ncu_export_cmd, ncu_path, parse_ncu_csv

    ncu = ncu_path()
    if ncu is None:
        sys.exit("gdn_breakdown --ncu: no ncu found (PATH, /opt/nvidia/nsight-compute); run without --ncu")
    for sid in shapes:
        for name in impls:
            with tempfile.TemporaryDirectory() as tmp:
                rep = Path(tmp, "r.ncu-rep")
                cmd = ncu_collect_cmd(ncu, rep, [sys.executable, __file__, "--ncu-child", name, "--shapes", sid])
                run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                if run.returncode != 0 or not rep.exists():
                    tail = " | ".join((run.stdout + run.stderr).strip().splitlines()[-3:])[:300]
                    print(f"{sid} {name}: ncu failed ({run.returncode}): {tail}", flush=True)
                    continue
                csv = subprocess.run(ncu_export_cmd(ncu, rep), capture_output=True, text=True, timeout=300).stdout
            kernels = parse_ncu_csv(csv)
            total = sum(k.duration_us or 0.0 for k in kernels)
            print(f"{sid} {name} (ncu): {total:.1f} us in {len(kernels)} kernels", flush=True)
            print("    | kernel | us | DRAM % | SM % | occupancy % | regs | grid | top stalls |", flush=True)
            for k in kernels:
                st = ", ".join(f"{x.reason} {x.fraction:.2f}" for x in k.stalls)
                print(f"    | {k.name[:40]} | {k.duration_us or 0:.1f} | {k.dram_throughput_pct or 0:.0f} | "
                      f"{k.sm_throughput_pct or 0:.0f} | {k.achieved_occupancy_pct or 0:.0f} | "
                      f"{k.registers_per_thread or 0:.0f} | {k.grid_size or 0:.0f} | {st} |", flush=True)


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from aka.contract.ops import get_op

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", default="promoted,fla,flashqla")
    ap.add_argument("--shapes", default="G1,G4,G5,G7")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--ncu", action="store_true", help="Nsight Compute per kernel instead of the torch profiler")
    ap.add_argument("--ncu-child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ncu_child:
        return _ncu_child(args.ncu_child, args.shapes)
    if args.ncu:
        return _ncu(args.impl.split(","), args.shapes.split(","))
    op = get_op("gdn_prefill")
    for sid in args.shapes.split(","):
        inputs = _inputs(op, sid)
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
