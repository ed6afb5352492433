"""Where an eager fa4 call spends its host time (device script; issue 18 point 3).

For small calls the GPU waits on the host: eager time ~ graph time + the host work not hidden
behind the previous GPU work. This prints, per call (mean over many back-to-back calls, no sync in
between, so the GPU never throttles the loop):
  - the whole entry point (plan lookup, allocation, descriptors, Triton launch),
  - torch.empty_like alone, a torch.zeros of the FUSED_MERGE counters,
  - Triton's JIT launch of the same kernel with the same arguments (binder, cache key, launcher),
  - a direct launch of the cached CompiledKernel (what a launch cache would do: no binder),
  - an empty Triton kernel through the JIT path.

The kernels are the contract's baseline.py of each op (fa4_prefill's two: the Triton kernel, and on
sm_90 the Gluon kernel, each forced through CONFIG "kernel"), the shapes and inputs the contract's
(workloads/fa4_*.yaml, kernels/fa4_*/inputs.py, seed 0): case ids of any set. The default prefill
shapes are E1 (one new token, 2 query heads: the fixed cost of a call) and P1.

    python scripts/device/fa4_host_cost.py [--decode D7-q1,D1-q1,D7-q4] [--prefill E1,P1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fa4_contract import inputs, kernel_module  # noqa: E402

from aka.contract.ops import get_op  # noqa: E402

N = 300


def host_us(fn, n=N):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


@triton.jit
def _empty(X, a, b, c, BLOCK: tl.constexpr):
    pass


def capture_launch(jit_fn):
    """Wrap jit_fn.run to keep the CompiledKernel and the bound argument values of the last launch."""
    seen = {}
    orig = jit_fn.run

    def run(*args, grid, warmup, **kwargs):
        kernel = orig(*args, grid=grid, warmup=warmup, **kwargs)
        device = triton.runtime.driver.active.get_current_device()
        binder = jit_fn.device_caches[device][-1]
        bound, _, _ = binder(*args, **kwargs)
        seen.update(kernel=kernel, grid=grid, vals=list(bound.values()), args=args, kwargs=kwargs)
        return kernel

    jit_fn.run = run
    return seen, lambda: setattr(jit_fn, "run", orig)


def direct(seen):
    k, grid, vals = seen["kernel"], seen["grid"], seen["vals"]
    dev = triton.runtime.driver.active.get_current_device()
    g = tuple(grid) + (1,) * (3 - len(grid))

    def launch():
        stream = triton.runtime.driver.active.get_current_stream(dev)
        k.run(g[0], g[1], g[2], stream, k.function, k.packed_metadata, None, None, None, *vals)

    return launch


def jit_only(jit_fn, seen):
    return lambda: jit_fn[seen["grid"]](*seen["args"], **seen["kwargs"])


def report(name, fn, jit_fn, extra="", mod=None):
    seen, undo = capture_launch(jit_fn)
    for obj in vars(mod).values() if mod else ():  # the kernels' own launch cache would skip the JIT
        if isinstance(obj, mod._Launch):
            obj.hits.clear()
    fn()
    torch.cuda.synchronize()
    undo()
    whole = host_us(fn)
    jit = host_us(jit_only(jit_fn, seen))
    try:
        d = host_us(direct(seen))
    except Exception as e:  # noqa: BLE001
        d = float("nan")
        print("direct launch failed:", type(e).__name__, str(e)[:200])
    print(f"{name:14s} whole call {whole:6.1f} us | Triton JIT launch {jit:6.1f} | "
          f"direct CompiledKernel {d:6.1f} {extra}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--decode", default="D7-q1,D1-q1,D7-q4", help="fa4_decode case ids")
    ap.add_argument("--prefill", default="E1,P1", help="fa4_prefill case ids")
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    x = torch.zeros(16, device="cuda")
    print(f"empty Triton kernel (JIT path): {host_us(lambda: _empty[(1,)](x, 1, 2, 3, BLOCK=16)):.1f} us", flush=True)
    q = torch.empty(16, 16, 256, device="cuda", dtype=torch.bfloat16)
    print(f"torch.empty_like(q): {host_us(lambda: torch.empty_like(q)):.1f} us; "
          f"torch.zeros(16, int32): {host_us(lambda: torch.zeros(16, dtype=torch.int32, device='cuda')):.1f} us",
          flush=True)
    dec_op = get_op("fa4_decode")
    dec = kernel_module(dec_op)
    for sid in filter(None, args.decode.split(",")):
        case = inputs(dec_op, sid)
        for cfg in ({}, {"FUSED_MERGE": True}, {"USE_TMA": False, "BLOCK_N": 32, "num_stages": 3}):
            saved = dict(dec.CONFIG)
            dec.CONFIG.update(cfg)
            report(sid, lambda c=case: dec.fa4_decode(**c), dec._fa4_decode_kernel, str(cfg), dec)
            dec.CONFIG.clear()
            dec.CONFIG.update(saved)
        del case
    pre_op = get_op("fa4_prefill")
    pre = kernel_module(pre_op)
    # the entry's two kernels, each forced through CONFIG "kernel": Triton anywhere, Gluon on sm_90 (where
    # "auto" picks it for the contract's inputs)
    kernels = [("triton", pre._fa4_prefill_kernel)]
    if torch.cuda.get_device_capability() == (9, 0):
        kernels.append(("gluon", pre._fa4_prefill_gluon_kernel))
    for sid in filter(None, args.prefill.split(",")):
        case = inputs(pre_op, sid)
        for kernel, jit_fn in kernels:
            saved = dict(pre.CONFIG)
            pre.CONFIG["kernel"] = kernel
            report(sid, lambda c=case: pre.fa4_prefill(**c), jit_fn, kernel, pre)
            pre.CONFIG.clear()
            pre.CONFIG.update(saved)
        del case


if __name__ == "__main__":
    main()
