"""Each step of a warm eager fa4 call's host path, timed on its own (device script; issue 18 point 3).

scripts/device/fa4_host_cost.py times the whole entry point against Triton's launch paths; this splits the
entry point (fa4_prefill's baseline.py on its Triton kernel, fa4_decode's baseline and promoted kernel) into
its steps and times each one alone, as a mean over back-to-back repetitions with no sync, so their sum can
be set against the whole call: shape reads, the plan lookup, allocations, the descriptor cache, the
argument tuple, the launch cache key, the compiled kernel's launch, and inside that launch the two TMA
tensor-map encodes (and, apart, the rule fa4_prefill's "auto" applies per call to pick its kernel).
Shapes and inputs are the contract's (case ids of any set, seed 0); prefill E1 is one new token.

    python scripts/device/fa4_host_steps.py [--prefill E1,P1] [--decode D7-q1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fa4_contract import inputs, kernel_module  # noqa: E402
from fa4_host_cost import host_us  # noqa: E402

from aka.contract.ops import get_op  # noqa: E402

N = 300  # as fa4_host_cost.py: a longer run of launches fills the GPU queue and the host blocks on it


def _hit(launch):
    """The launch cache's one entry after a warm call: (compiled kernel, constexpr values)."""
    (key, hit), = launch.hits.items()
    return key, _pair(hit)


def _pair(hit):
    """(compiled kernel, constexpr values) of a cache entry: aka.launch's kept launch, or the (compiled, tail)
    pair of a module with its own launch cache (a promoted copy made before aka.launch)."""
    return hit if isinstance(hit, tuple) else (hit.compiled, hit.tail)


def _encode(compiled, desc):
    """One TMA map encode as Triton's launcher does it (the function's arity moved between versions)."""
    import inspect

    from triton.backends.nvidia import driver as nv

    meta = (getattr(compiled.metadata, "tensordesc_meta", None) or [None])[0]  # None: not encoded by the launcher
    extra = (None,) * (len(inspect.signature(nv.make_tensordesc_arg).parameters) - 2)  # 3.6: 2, later: 3
    return lambda: nv.make_tensordesc_arg(desc, meta, *extra)


def show(name, steps, whole):
    total = 0.0
    for label, fn, counted in steps:
        us = host_us(fn, N)
        total += us if counted else 0.0
        print(f"  {label:34s} {us:7.2f} us{'' if counted else '  (inside the launch above)'}", flush=True)
    print(f"  {'sum of the steps':34s} {total:7.2f} us", flush=True)
    print(f"{name}: whole call {host_us(whole, N):.2f} us", flush=True)


def prefill(sid):
    op = get_op("fa4_prefill")
    mod = kernel_module(op, "baseline")  # nothing promoted: the baseline is the shipped kernel
    mod.CONFIG["kernel"] = "triton"  # the steps below are the Triton launch path's ("auto" runs Gluon on sm_90)
    c = inputs(op, sid)
    q, k, v, kv_lens = c["q"], c["k_cache"], c["v_cache"], c["kv_lens"]
    mod._LAUNCH.hits.clear()
    mod.fa4_prefill(**c)
    torch.cuda.synchronize()
    _, (compiled, consts) = _hit(mod._LAUNCH)
    t_total, hq, d = q.shape
    n = kv_lens.shape[0]
    plan_args = (mod.CONFIG, t_total, hq, d, k.shape[1], k.shape[2], n, True, None, q.device)
    scale, grid, use_tma, block_n, kw, plan_key = mod._plan(*plan_args)
    kd, vd = mod._cached_descs(k, v, block_n)
    o = torch.empty_like(q)

    def args():
        return (q, k, v, o, c["page_table"], c["cu_seqlens_q"], kv_lens, kd, vd, scale, n,
                q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
                v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), c["page_table"].stride(0))

    a = args()
    g3 = (*grid, 1, 1)[:3]
    steps = [
        ("shapes, asserts, contiguity", lambda: (q.shape, k.shape, v.shape == k.shape, kv_lens.shape[0],
                                                  k.is_contiguous() and v.is_contiguous()), True),
        ("plan lookup (_plan, a dict hit)", lambda: mod._plan(*plan_args), True),
        ("torch.empty_like(q)", lambda: torch.empty_like(q), True),
        ("descriptor cache (_cached_descs)", lambda: mod._cached_descs(k, v, block_n), True),
        ("argument tuple (13 strides)", args, True),
        ("launch cache key (_arg_key x 22)", lambda: (plan_key, tuple(map(mod._arg_key, a))), True),
        ("compiled kernel launch", lambda: compiled[g3](*a, *consts), True),
        ("  one TMA map encode", _encode(compiled, kd), False),
        ("  \"auto\"'s rule (_gluon_unfit)", lambda: mod._gluon_unfit(q, k, v, c["page_table"], c["cu_seqlens_q"],
                                                                     kv_lens), False),
    ]
    show(f"prefill {sid} ({'TMA' if use_tma else 'gather'})", steps, lambda: mod.fa4_prefill(**c))


def decode(sid, impl):
    op = get_op("fa4_decode")
    mod = kernel_module(op, impl)
    c = inputs(op, sid)
    q, k, v = c["q"], c["k_cache"], c["v_cache"]
    mod._SPLIT_LAUNCH.hits.clear()
    mod._MERGE_LAUNCH.hits.clear()
    mod.fa4_decode(**c)
    torch.cuda.synchronize()
    _, (split_k, split_c) = _hit(mod._SPLIT_LAUNCH)
    merge = [_pair(h) for h in mod._MERGE_LAUNCH.hits.values()]
    rows, hq, d = q.shape
    plan_args = (mod.CONFIG, rows, hq, d, k.shape[1], k.shape[2], c["kv_lens"].shape[0], c["page_table"].shape[1],
                 q.device, None, True)
    scale, splits, grid, merge_grid, split_kw, merge_kw, ws_len, n_o, ps, plan_key = mod._plan(*plan_args)
    o = torch.empty_like(q)
    kd, vd = mod._descs(k, v, split_kw["BLOCK_N"]) if split_kw["USE_TMA"] else (k, v)
    ws = torch.empty(ws_len, dtype=torch.float32, device=q.device) if splits > 1 else o
    o_part, lse_part = (ws.narrow(0, 0, n_o), ws.narrow(0, n_o, ws_len - n_o)) if splits > 1 else (o, o)
    pt = c["page_table"]

    def split_args():
        return (q, k, v, o, pt, c["kv_lens"], o_part, lse_part, o, kd, vd, scale,
                q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1),
                v.stride(2), o.stride(0), o.stride(1), pt.stride(0), *ps, splits)

    sa = split_args()
    steps = [
        ("plan lookup (_plan, a dict hit)", lambda: mod._plan(*plan_args), True),
        ("torch.empty_like(q)", lambda: torch.empty_like(q), True),
        ("workspace torch.empty + 2 narrows", lambda: torch.empty(ws_len, dtype=torch.float32, device=q.device)
         .narrow(0, 0, n_o), splits > 1),
        ("argument tuple (strides)", split_args, True),
        ("launch cache key (_arg_key)", lambda: (plan_key, tuple(map(mod._arg_key, sa))), True),
        ("split kernel launch", lambda: split_k[(*grid, 1, 1)[:3]](*sa, *split_c), True),
    ]
    if split_kw["USE_TMA"]:
        steps.insert(3, ("descriptor cache (_descs)", lambda: mod._descs(k, v, split_kw["BLOCK_N"]), True))
        steps.append(("  one TMA map encode", _encode(split_k, kd), False))
    if merge:
        merge_k, merge_c = merge[0]
        ma = (o_part, lse_part, o, c["kv_lens"], *ps, o.stride(0), o.stride(1), splits)
        steps.append(("merge kernel launch", lambda: merge_k[(*merge_grid, 1, 1)[:3]](*ma, *merge_c), True))
    show(f"decode {sid} {impl}: splits {splits}, TMA {split_kw['USE_TMA']}", steps, lambda: mod.fa4_decode(**c))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefill", default="E1,P1", help="fa4_prefill case ids (baseline, Triton kernel)")
    ap.add_argument("--decode", default="D7-q1", help="fa4_decode case ids (baseline and promoted)")
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__, flush=True)
    for sid in filter(None, args.prefill.split(",")):
        prefill(sid)
    for sid in filter(None, args.decode.split(",")):
        for impl in ("baseline", "promoted"):
            decode(sid, impl)


if __name__ == "__main__":
    main()
