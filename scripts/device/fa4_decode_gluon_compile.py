"""Compile fa4_decode's Gluon split kernel (kernels/fa4_decode/stages/gluon_split.py) for sm_90a offline (no GPU)
and print what ptxas made of it.

    PYTHONPATH=/tmp/t36 .venv/bin/python scripts/device/fa4_decode_gluon_compile.py [--stages N] [--dump DIR]

Runs with whatever Triton it imports (the GPU machines have 3.6.0: install that wheel apart from the venv's,
e.g. `pip install --no-deps --target /tmp/t36 triton==3.6.0`, and put it first on PYTHONPATH). Loads the op's
baseline as aka renders it from the stage files (one module, the CONFIG in it), builds the kernel's signature
by hand as Triton's launcher would specialise it (tensor descriptors with their NVMMA layout, 16-byte aligned
pointers, 16-divisible strides), compiles with scripts/device/gluon_compile.py for the (G, q_len) points (16,
1), (16, 4), (8, 4) with several splits (the partial-store epilogue, what every full shape runs) and (16, 4)
with one split (the bf16 store), and prints per kernel: registers at launch and spills (cuobjdump -res-usage),
shared memory (Triton's metadata), the setmaxnreg values of the partitions, and PTX facts a hang would come
from (mbarrier arrivals, named barriers, wgmma and TMA counts, expect-tx bytes). Exit 1 on a spill, shared
memory past a CTA's 227 KB, or a compile error.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from gluon_compile import compile_sm90a, report  # scripts/device/, beside this file

ROOT = Path(__file__).resolve().parents[2]
# (G, q_len, several splits, the balanced chunk)
POINTS = [(16, 1, True, True), (16, 4, True, True), (8, 4, True, True), (16, 4, True, False), (16, 4, False, False)]


def _load_module():
    """kernels/fa4_decode/baseline.py, rendered from the stages first, imported by path."""
    sys.path.insert(0, str(ROOT))
    from aka.contract.ops import get_op

    spec = importlib.util.spec_from_file_location("fa4_decode_baseline", get_op("fa4_decode").path("baseline"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _signature(mod, group: int, q_len: int, split: bool, balance: bool, stages: int, regs_load: int):
    fn = mod._fa4_decode_gluon_kernel
    layout = mod._gl_smem_layout()
    desc = f"tensordesc<bf16[{mod._GL_BLOCK_N}, {mod._GL_HEAD_D}],{layout!r}>"
    part = "*fp32" if split else "*bf16"  # one split: the partial pointers are o itself (unused)
    sig = {
        "q_ptr": "*bf16", "k_desc": desc, "v_desc": desc, "o_ptr": "*bf16", "pt_ptr": "*i32", "kvl_ptr": "*i32",
        "op_ptr": part, "lsep_ptr": part,
        "qk_scale": "fp32",
        "stride_qt": "i32", "stride_qh": "i32", "stride_ot": "i32", "stride_oh": "i32", "stride_pt": "i32",
        "stride_opt": "i32", "stride_oph": "i32", "stride_ops": "i32", "stride_lt": "i32", "stride_lh": "i32",
        "n_seqs": "i32", "NUM_SPLITS": "i32",
    }
    cfg = mod.CONFIG
    consts = dict(Q_LEN=q_len, G=group, HKV=1, PAGE=mod._GL_PAGE, HEAD_D=mod._GL_HEAD_D, BLOCK_M=mod._GL_BLOCK_M,
                  BLOCK_N=mod._GL_BLOCK_N, STAGES=stages, SPLIT=split, REGS_LOADER=regs_load, BALANCE=balance,
                  BLOCK_B=128, SLOTS=132, MIN_CHUNK=cfg["MIN_SPLIT_TOKENS"], OVERHEAD=cfg["SPLIT_OVERHEAD_TOKENS"])
    sig.update(dict.fromkeys(consts, "constexpr"))
    # What Triton marks at a launch: 16-byte aligned pointers; 16-divisible strides (Hq * 256, 256, the
    # partials' S * 256 * Hq, S * 256, 256). stride_pt (max_pages), stride_lt / stride_lh (S * Hq, S) and
    # NUM_SPLITS are left unmarked: they need not be multiples of 16.
    names = fn.arg_names
    marked = ["q_ptr", "o_ptr", "pt_ptr", "kvl_ptr", "op_ptr", "lsep_ptr", "stride_qt", "stride_qh", "stride_ot",
              "stride_oh"]
    if split:
        marked += ["stride_opt", "stride_oph", "stride_ops"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in marked}
    if not split:  # one split: Triton specialises NUM_SPLITS == 1 and the zero strides as constants
        for n in ("stride_opt", "stride_oph", "stride_ops", "stride_lt", "stride_lh"):
            sig[n] = "constexpr"
            consts[n] = 0
        sig["NUM_SPLITS"] = "constexpr"
        consts["NUM_SPLITS"] = 1
    return fn, sig, consts, attrs


def _compile_one(mod, group: int, q_len: int, split: bool, balance: bool, stages: int, regs_load: int,
                 dump: Path | None) -> bool:
    fn, sig, consts, attrs = _signature(mod, group, q_len, split, balance, stages, regs_load)
    label = (f"G={group} q_len={q_len} {'split' if split else 'one split'}{' balanced' if balance else ''} "
             f"STAGES={stages} REGS_LOADER={regs_load}")
    print(f"== {label}")
    kernel = compile_sm90a(fn, sig, consts, attrs, {"num_warps": 4})
    if kernel is None:
        return False
    tag = f"g{group}_q{q_len}_{'split' if split else 'one'}{'_bal' if balance else ''}_s{stages}"
    ok, facts = report(kernel, dump, f"fa4_decode_gluon_{tag}")
    default = next((int(n) for a, n in facts["setmaxnreg"] if a == "inc"), None)
    loader = next((int(n) for a, n in facts["setmaxnreg"] if a == "dec"), None)
    print(f"registers a thread: {facts['reg']} at launch ({facts['warps']} warps); in the region: consumer "
          f"(default partition) {default}, loader warpgroup {loader}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", type=int, nargs="*", default=None,
                    help="ring slots to compile (default: CONFIG's gluon_stages)")
    ap.add_argument("--dump", type=Path, default=None, help="write ttgir/llir/ptx/sass here")
    args = ap.parse_args()

    import triton

    mod = _load_module()
    print(f"triton {triton.__version__} ({Path(triton.__file__).parent}); target sm_90a")
    stages = args.stages or [int(mod.CONFIG["gluon_stages"])]
    regs_load = int(mod.CONFIG["gluon_regs_load"])
    ok = [_compile_one(mod, g, ql, split, bal, s, regs_load, args.dump) for s in stages for g, ql, split, bal in POINTS]
    print("all compiled without spills" if all(ok) else "FAILED: a compile error, a spill or too much shared memory")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
