"""One fa4_decode call, for Nsight Compute (device script, issue 18 point 2: why q_len 4 tiles sit
further from the bandwidth floor than q_len 1 tiles).

The shape and its inputs are the contract's (workloads/fa4_decode.yaml, kernels/fa4_decode/inputs.py,
seed 0). The call is warmed up (JIT, allocator) and then made once between cudaProfilerStart and
cudaProfilerStop, so `ncu --profile-from-start off` sees only that call's kernels (split + merge):

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        python scripts/device/fa4_decode_ncu.py --impl baseline --shape D2-q4

--impl: baseline or promoted (the contract's kernel files); --shape: a case id of any of the contract's
sets (D2-q4, S1, E5, ...); --config: a JSON object merged over that module's CONFIG
(e.g. '{"SPLIT_POLICY": "waves"}').
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fa4_contract import kernel_module, one_case  # noqa: E402


def main():
    import torch

    from aka.contract.ops import get_op

    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", default="baseline", choices=["baseline", "promoted"])
    ap.add_argument("--shape", default="D2-q4")
    ap.add_argument("--config", default="{}")
    args = ap.parse_args()
    op = get_op("fa4_decode")
    mod = kernel_module(op, args.impl)
    mod.CONFIG.update(json.loads(args.config))
    case = one_case(op, args.shape)
    inputs = op.inputs.make_inputs(case, 0, "cuda")
    fn = getattr(mod, op.spec.entry)
    for _ in range(3):
        fn(**inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn(**inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    splits = list(mod._PLANS.values())[-1][1]  # the plan of this call: (scale, splits, ...)
    print(f"profiled {args.impl} {args.shape} config {args.config} splits {splits} "
          f"KV {op.model.kv_bytes(case) / 1e6:.0f} MB", flush=True)


if __name__ == "__main__":
    main()
