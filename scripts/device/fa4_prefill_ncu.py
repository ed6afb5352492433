"""One fa4_prefill call of one implementation, for Nsight Compute (device script, issue 18 point 1).

The shape and its inputs are the contract's (workloads/fa4_prefill.yaml, kernels/fa4_prefill/inputs.py,
seed 0). The call is warmed up (JIT, autotune, allocator) and then made once between cudaProfilerStart
and cudaProfilerStop, so `ncu --profile-from-start off` sees only that call's kernels:

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section LaunchStats python scripts/device/fa4_prefill_ncu.py --impl baseline --shape P7

--impl: baseline or promoted (the contract's kernel files; nothing is promoted since the baseline holds the
Gluon kernel for sm_90 and the Triton kernel, CONFIG "kernel" "auto" picking one), or a competitor of the contract
(kernels/fa4_prefill/competitors.py: sdpa, torch's SDPA on the gathered dense K/V as `aka bench --impl
sdpa` times it; flash_attn4); --shape: a case id of any of the contract's sets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fa4_contract import kernel_module, one_case  # noqa: E402


def main():
    import torch

    from aka.contract.ops import get_op

    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", default="baseline")
    ap.add_argument("--shape", default="P7")
    args = ap.parse_args()
    op = get_op("fa4_prefill")
    inputs = op.inputs.make_inputs(one_case(op, args.shape), 0, "cuda")
    if args.impl in ("baseline", "promoted"):
        entry = getattr(kernel_module(op, args.impl), op.spec.entry)
        fn = lambda: entry(**inputs)  # noqa: E731
    else:
        from kernels.fa4_prefill import competitors

        fn = getattr(competitors, args.impl)(inputs)
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
