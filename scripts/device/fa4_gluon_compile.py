"""Compile fa4_prefill's Gluon kernel (kernels/fa4_prefill/stages/gluon_fwd.py) for sm_90a offline (no GPU) and print
what ptxas made of it.

    PYTHONPATH=/tmp/t36 .venv/bin/python scripts/device/fa4_gluon_compile.py [--group G] [--space] [--dump DIR]

Runs with whatever Triton it imports (the H200 test machine has 3.6.0: install that wheel apart from
the venv's, e.g. `pip install --no-deps --target /tmp/t36 triton==3.6.0`, and put it first on
PYTHONPATH). Loads the stage file as a package module beside its siblings (it imports .common) and the
Gluon kernel's CONFIG values (the gluon_* keys) from stages/entry.py. Builds the kernel's signature by
hand as Triton's launcher would specialise it (tensor descriptors with their NVMMA layout, pointers and
strides 16-divisible), compiles with ``triton.compile(GluonASTSource(...), target=GPUTarget("cuda", 90,
32))`` and prints per kernel: registers at launch and spills (cuobjdump -res-usage on the cubin,
Triton's bundled cuobjdump), shared memory (Triton's metadata), the setmaxnreg values of the
warp-specialised partitions, and a few PTX facts a hang would come from (mbarrier arrivals, named
barriers). Exit 1 on a spill or a compile error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gluon_compile import compile_sm90a, report  # scripts/device/, beside this file

ROOT = Path(__file__).resolve().parents[2]


def _load_module():
    """gluon_fwd.py as kernels.fa4_prefill.stages.gluon_fwd (its relative imports need the package), and the
    entry stage, whose CONFIG and SPACE hold the Gluon kernel's gluon_* keys."""
    import importlib

    sys.path.insert(0, str(ROOT))
    return (importlib.import_module("kernels.fa4_prefill.stages.gluon_fwd"),
            importlib.import_module("kernels.fa4_prefill.stages.entry"))


def _signature(mod, group: int, cfg: dict):
    fn = mod._fa4_prefill_gluon_kernel
    layout = mod._smem_layout()
    desc = f"tensordesc<bf16[{mod._HALF_M}, {mod._HEAD_D}],{layout!r}>"
    sig = {
        "q_desc": desc, "k_desc": desc, "v_desc": desc,
        "o_ptr": "*bf16", "pt_ptr": "*i32", "cu_ptr": "*i32", "kvl_ptr": "*i32",
        "qk_scale": "fp32", "N": "i32",
        "stride_ot": "i32", "stride_oh": "i32", "stride_pt": "i32",
    }
    consts = dict(G=group, PAGE=mod._PAGE, HEAD_D=mod._HEAD_D, BLOCK_M=mod._BLOCK_M, BLOCK_N=mod._BLOCK_N,
                  STAGES=int(cfg["gluon_stages"]), REGS_CONSUMER=int(cfg["gluon_regs"]),
                  REGS_LOADER=int(cfg["gluon_regs_load"]),
                  HEAD_FAST=cfg.get("gluon_grid", "head_fast") == "head_fast",
                  HEAVY_FIRST=cfg.get("gluon_tile_order", "heavy_first") == "heavy_first")
    sig.update(dict.fromkeys(consts, "constexpr"))
    # Triton marks 16-byte aligned pointers and 16-divisible ints (Hq * 256, 256, a 16-divisible max_pages).
    names = fn.arg_names
    attrs = {(names.index(n),): [["tt.divisibility", 16]]
             for n in ("o_ptr", "pt_ptr", "cu_ptr", "kvl_ptr", "stride_ot", "stride_oh")}
    return fn, sig, consts, attrs


def _compile_one(mod, group: int, cfg: dict, dump: Path | None) -> bool:
    """Compile one configuration and print its figures; True when it compiled without spills."""
    fn, sig, consts, attrs = _signature(mod, group, cfg)
    label = " ".join(f"{k}={v}" for k, v in cfg.items())
    print(f"== G={group} {label}")
    kernel = compile_sm90a(fn, sig, consts, attrs, {"num_warps": 4})
    if kernel is None:
        return False
    tag = "_".join(f"{k}{v}" for k, v in cfg.items())
    ok, facts = report(kernel, dump, f"fa4_gluon_{tag}")
    default = next((int(n) for a, n in facts["setmaxnreg"] if a == "dec"), None)  # the default partition's
    print(f"registers a thread: {facts['reg']} at launch ({facts['warps']} warps); in the region: default "
          f"partition (consumer 0) {default}, consumer 1 {cfg['gluon_regs']}, loader {cfg['gluon_regs_load']}; "
          f"{128 * (default or 0) + 128 * cfg['gluon_regs'] + 128 * cfg['gluon_regs_load']} of 65536 "
          "(the loader's warp counts as a warpgroup)")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", type=int, default=16, help="Hq // Hkv (a constexpr of the kernel)")
    ap.add_argument("--space", action="store_true", help="every SPACE combination, not only CONFIG")
    ap.add_argument("--dump", type=Path, default=None, help="write ttgir/llir/ptx/sass here")
    args = ap.parse_args()

    import itertools

    import triton

    mod, entry = _load_module()
    print(f"triton {triton.__version__} ({Path(triton.__file__).parent}); target sm_90a")
    config = {k: v for k, v in entry.CONFIG.items() if k.startswith("gluon_")}
    cfgs = [config]
    if args.space:
        space = {k: v for k, v in entry.SPACE.items() if k.startswith("gluon_")}
        cfgs = [dict(config, **dict(zip(space, vals))) for vals in itertools.product(*space.values())]
    ok = [_compile_one(mod, args.group, cfg, args.dump) for cfg in cfgs]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
