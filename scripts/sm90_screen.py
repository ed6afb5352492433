"""Compile the fa4 kernels for sm_90 on this CPU machine and print registers / spills / shared memory.

Why: a device minute spent on a tile that spills is wasted; ptxas tells that offline. The local
Triton may differ from the device's (3.9 here, 3.6 there), so treat the numbers as a screen, not a
measurement; the device benchmark prints the numbers of the code it timed.

    python scripts/sm90_screen.py prefill BLOCK_M=64 BLOCK_N=32 num_warps=4 num_stages=2 [USE_TMA=1 ...]
    python scripts/sm90_screen.py decode BLOCK_M=64 BLOCK_N=32 Q_LEN=4 G=16 num_warps=4 num_stages=3 ...
"""

from __future__ import annotations

import inspect
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from aka.evaluate.static.compstats import res_usage  # noqa: E402

DEFAULTS = {
    "prefill": dict(G=16, PAGE=64, HEAD_D=256, BLOCK_M=128, BLOCK_N=64, PACK_GQA=True, SPLIT_CAUSAL=True,
                    USE_TMA=True, WARP_SPEC=False, num_warps=8, num_stages=2),
    "decode": dict(Q_LEN=1, G=16, PAGE=128, HEAD_D=256, BLOCK_M=16, BLOCK_N=32, SPLIT=True, LAZY_RESCALE=False,
                   USE_TMA=False, FUSED_MERGE=False, num_warps=4, num_stages=3),
}


def _value(text):
    if text in ("True", "true", "1"):
        return True
    if text in ("False", "false", "0"):
        return False
    return int(text)


def signature(fn, consts, block_n, head_d):
    sig = {}
    for name in inspect.signature(fn.fn).parameters:
        p = fn.params[fn.arg_names.index(name)]
        if p.is_constexpr:
            sig[name] = "constexpr"
        elif name.endswith("_desc"):
            sig[name] = f"tensordesc<bf16[{block_n}, {head_d}]>"
        elif name in ("qk_scale",):
            sig[name] = "fp32"
        elif name in ("OP", "LSEP"):
            sig[name] = "*fp32"
        elif name in ("PT", "CU", "KVL", "CNT"):
            sig[name] = "*i32"
        elif name in ("Q", "K", "V", "O"):
            sig[name] = "*bf16"
        else:
            sig[name] = "i32"
    return sig


def main():
    which = sys.argv[1]
    cfg = dict(DEFAULTS[which])
    for arg in sys.argv[2:]:
        k, v = arg.split("=")
        cfg[k] = _value(v)
    if which == "prefill":
        from kernels.fa4_prefill.stages.triton_fwd import _fa4_prefill_kernel as fn  # the Triton kernel's stage
    else:
        from kernels.fa4_decode.baseline import _fa4_decode_kernel as fn
    warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
    sig = signature(fn, cfg, cfg["BLOCK_N"], cfg["HEAD_D"])
    if not cfg.get("USE_TMA"):
        for name in sig:
            if name.endswith("_desc"):
                sig[name] = "*bf16"
    # what a real call specialises: pointers and strides divisible by 16 (torch allocations, D = 256)
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if sig[n].startswith("*") or (sig[n] == "i32" and n.startswith("stride"))}
    src = ASTSource(fn, sig, constexprs={(fn.arg_names.index(k),): v for k, v in cfg.items()}, attrs=attrs)
    ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    use = res_usage(ck.asm.get("cubin"))
    sass_wgmma = "wgmma" in ck.asm.get("ptx", "")
    print(which, cfg, f"w{warps} s{stages}", "smem", ck.metadata.shared, use, "wgmma" if sass_wgmma else "no-wgmma")


if __name__ == "__main__":
    main()
