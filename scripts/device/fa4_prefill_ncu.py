"""One fa4_prefill call of one implementation, for Nsight Compute (device script, issue 18 point 1).

The call is warmed up (JIT, autotune, allocator) and then made once between cudaProfilerStart and
cudaProfilerStop, so `ncu --profile-from-start off` sees only that call's kernels:

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section LaunchStats python scripts/device/fa4_prefill_ncu.py --impl promoted --shape P7

--impl: baseline or promoted (kernels/fa4_prefill/<impl>.py) or sdpa (torch's flash backend on the
gathered dense K/V, as scripts/device/bench_fa4_prefill.py times it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import bench_fa4_prefill as bp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", default="promoted")
    ap.add_argument("--shape", default="P7")
    args = ap.parse_args()
    q_lens, prefixes, hq, hkv = bp.spec(args.shape)
    case = bp.make_case(q_lens, prefixes, hq, hkv, seed=1)
    if args.impl == "sdpa":
        fn = bp.sdpa_fn(case, q_lens, prefixes, hq, hkv)
    else:
        mod = importlib.import_module(f"kernels.fa4_prefill.{args.impl}")
        fn = lambda: mod.fa4_prefill(**case)  # noqa: E731
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print("profiled", args.impl, args.shape, flush=True)


if __name__ == "__main__":
    main()
