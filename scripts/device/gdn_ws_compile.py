"""Compile the gdn_prefill Gluon forward (kernels/gdn_prefill/stages/fwd_ws.py) for sm_90a offline (no GPU)
and print what ptxas made of it.

    PYTHONPATH=/tmp/t36 .venv/bin/python scripts/device/gdn_ws_compile.py [--heads 16/32] [--set K=V] [--dump DIR]

Runs with whatever Triton it imports (the H200 test machine has 3.6.0; off the device install that wheel
apart from the venv's, `pip install --no-deps --target /tmp/t36 triton==3.6.0`, and put it first on
PYTHONPATH). Loads the stage file as a package module beside its siblings (it imports .common and .fwd),
builds the kernel's signature as Triton's launcher would specialise it (tensor descriptors with their
NVMMA layout, 16-byte aligned pointers, 16-divisible ints), compiles with
``triton.compile(GluonASTSource(...), target=GPUTarget("cuda", 90, 32))`` with and without h0, at
(HK, HV) = (16, 32) and (4, 16), and prints per configuration: registers at launch and
spills (cuobjdump -res-usage, Triton's bundled cuobjdump), shared memory (Triton's metadata), the
setmaxnreg values of the partitions, and the barrier / wgmma / TMA counts a hang would come from.
Exit 1 on a spill or a compile error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gluon_compile import compile_sm90a, report  # scripts/device/, beside this file

ROOT = Path(__file__).resolve().parents[2]


def _load_module():
    """fwd_ws.py as kernels.gdn_prefill.stages.fwd_ws (its relative imports need the package)."""
    import importlib

    sys.path.insert(0, str(ROOT))
    return importlib.import_module("kernels.gdn_prefill.stages.fwd_ws")


def _config(mod) -> dict:
    """The shipped values: fwd_ws.py's constants (registers of the partitions, ring slots)."""
    return {"ws_regs": mod._WS_REGS, "ws_regs_out": mod._WS_REGS_OUT, "ws_regs_load": mod._WS_REGS_LOAD,
            "ws_stages": mod._WS_STAGES[64], "ws_bw": 64}


def _signature(mod, hk: int, hv: int, has_h0: bool, cfg: dict):
    fn = mod._fwd_ws_kernel
    bt, k, bw = mod.BT, 128, int(cfg["ws_bw"])

    def desc(cols):
        return f"tensordesc<bf16[{bt}, {cols}],{mod._ws_smem_layout(cols)!r}>"

    sig = {
        "q_desc": desc(k), "k_desc": desc(k), "v_desc": desc(bw), "tb_desc": desc(bt), "o_desc": desc(bw),
        "g_ptr": "*fp32", "o_ptr": "*bf16", "h0_ptr": "*fp32", "ht_ptr": "*fp32",
        "mc_ptr": "*fp32", "cu_ptr": "*i32", "cus_ptr": "*i32", "N": "i32", "SEG": "i32", "scale": "fp32",
    }
    consts = dict(HV=hv, HK=hk, K=k, V=128, BT=bt, LOG_N=4, HAS_H0=has_h0, STAGES=int(cfg["ws_stages"]), BW=bw,
                  REGS=int(cfg["ws_regs"]), REGS_OUT=int(cfg["ws_regs_out"]), REGS_LOAD=int(cfg["ws_regs_load"]))
    sig.update(dict.fromkeys(consts, "constexpr"))
    names = fn.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]]
             for n in ("g_ptr", "o_ptr", "h0_ptr", "ht_ptr", "mc_ptr", "cu_ptr", "cus_ptr")}
    return fn, sig, consts, attrs


def _compile_one(mod, hk: int, hv: int, has_h0: bool, cfg: dict, dump: Path | None) -> bool:
    """Compile one configuration and print its figures; True when it compiled without spills."""
    fn, sig, consts, attrs = _signature(mod, hk, hv, has_h0, cfg)
    tag = f"HK{hk}_HV{hv}_H0{int(has_h0)}_BW{cfg['ws_bw']}"
    print(f"== {tag} regs={cfg['ws_regs']} regs_out={cfg['ws_regs_out']} regs_load={cfg['ws_regs_load']}"
          f" stages={cfg['ws_stages']} bw={cfg['ws_bw']}")
    options = {"num_warps": 4, **({"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") else {})}
    kernel = compile_sm90a(fn, sig, consts, attrs, options)
    return kernel is not None and report(kernel, dump, f"gdn_ws_{tag}")[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", default="16/32,4/16", help="HK/HV pairs, comma-separated")
    ap.add_argument("--dump", type=Path, default=None, help="write ttgir/llir/ptx/sass here")
    ap.add_argument("--set", default="", help="overrides of the shipped values, e.g. ws_stages=1,ws_regs=232,ws_bw=32")
    args = ap.parse_args()

    import triton

    mod = _load_module()
    cfg = _config(mod)
    cfg.update({k: int(v) for k, v in (kv.split("=") for kv in args.set.split(",") if kv)})
    print(f"triton {triton.__version__} ({Path(triton.__file__).parent}); target sm_90a")
    heads = [tuple(int(x) for x in h.split("/")) for h in args.heads.split(",")]
    ok = [_compile_one(mod, hk, hv, h0, cfg, args.dump) for hk, hv in heads for h0 in (False, True)]
    print(f"{sum(ok)} of {len(ok)} configurations compiled without spills")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
