"""One fa4_decode call, for Nsight Compute (device script, issue 18 point 2: why q_len 4 tiles sit
further from the bandwidth floor than q_len 1 tiles).

The call is warmed up (JIT, allocator) and then made once between cudaProfilerStart and
cudaProfilerStop, so `ncu --profile-from-start off` sees only that call's kernels (split + merge):

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        python scripts/device/fa4_decode_ncu.py --impl baseline --shape D2-q4

--impl: baseline or promoted (kernels/fa4_decode/<impl>.py); --config: a JSON object merged over that
module's CONFIG (e.g. '{"SPLIT_POLICY": "waves"}').
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import bench_fa4_decode as bd  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", default="baseline")
    ap.add_argument("--shape", default="D2-q4")
    ap.add_argument("--config", default="{}")
    args = ap.parse_args()
    mod = importlib.import_module(f"kernels.fa4_decode.{args.impl}")
    mod.CONFIG.update(json.loads(args.config))
    kv_lens, q_len, hq, hkv = bd.SHAPES[args.shape]
    case = bd.make_case(kv_lens, q_len, hq, hkv, seed=1)
    for _ in range(3):
        mod.fa4_decode(**case)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    mod.fa4_decode(**case)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    splits = list(mod._PLANS.values())[-1][1]  # the plan of this call: (scale, splits, ...)
    print(f"profiled {args.impl} {args.shape} config {args.config} splits {splits} "
          f"KV {bd.kv_bytes(kv_lens, hkv) / 1e6:.0f} MB", flush=True)


if __name__ == "__main__":
    main()
