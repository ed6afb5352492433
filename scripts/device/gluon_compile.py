"""What the offline Gluon compile scripts share (fa4_gluon_compile.py, gdn_ws_compile.py): compile one
kernel for sm_90a without a GPU and print what ptxas made of it.

Registers and spills come from ``cuobjdump -res-usage`` on the cubin (aka.evaluate.static.compstats.res_usage,
with Triton's bundled cuobjdump); shared memory from Triton's metadata; the setmaxnreg values, mbarrier
arrivals, named barriers, wgmma and TMA instructions from the PTX (what a hang or a slow partition would
come from)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

SMEM_LIMIT = 227 * 1024  # bytes of shared memory a CTA may have on the H100 / H200


def compile_sm90a(fn, sig: dict, consts: dict, attrs: dict, options: dict):
    """triton.compile of a Gluon kernel for sm_90a; None (with the reason printed) when it fails."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    try:
        return triton.compile(GluonASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                              options=options)
    except Exception as exc:
        print(f"compile failed: {type(exc).__name__}: {exc}")
        return None


def report(kernel, dump: Path | None, stem: str) -> tuple[bool, dict]:
    """Print the compiled kernel's figures; (no spill and shared memory within a CTA's, facts) where facts
    holds the launch registers, the warps and the setmaxnreg values in PTX order."""
    from triton import knobs

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for aka
    from aka.evaluate.static.compstats import res_usage

    md, ptx = kernel.metadata, kernel.asm["ptx"]
    if dump:
        dump.mkdir(parents=True, exist_ok=True)
        for k in ("ttgir", "llir", "ptx"):
            (dump / f"{stem}.{k}").write_text(kernel.asm[k])
        try:
            (dump / f"{stem}.sass").write_text(kernel.asm["sass"])
        except Exception as exc:  # no disassembler
            print(f"no sass: {exc}")
    usage = res_usage(kernel.asm["cubin"], knobs.nvidia.cuobjdump.path)
    spills, reg = 0, None
    for name, u in usage.items():
        spills += u.get("STACK", 0) + u.get("LOCAL", 0)
        reg = u.get("REG")
        print(f"{name}: REG {reg} (at launch) STACK {u.get('STACK', 0)} LOCAL {u.get('LOCAL', 0)} "
              f"SHARED(static) {u.get('SHARED', 0)}")
    print(f"metadata: num_warps {md.num_warps} shared {md.shared} B ({md.shared / 1024:.1f} KB)")
    # Triton's warp-specialise lowering: the default partition takes registers while the workers wait
    # (inc), then each partition sets its own count at the region's start.
    regs = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)
    print("setmaxnreg (in PTX order):", " ".join(f"{a}{n}" for a, n in regs))
    print("mbarrier.arrive:", len(re.findall(r"mbarrier\.arrive", ptx)), "| try_wait:",
          len(re.findall(r"mbarrier\.try_wait", ptx)), "| bar.sync / barrier.sync:",
          " ".join(sorted(set(" ".join(b.split()) for b in re.findall(r"(?:bar|barrier)\.sync[^;]*;", ptx)))))
    print("wgmma:", len(re.findall(r"wgmma\.mma_async", ptx)), "| TMA loads:",
          len(re.findall(r"cp\.async\.bulk\.tensor", ptx)), "| expect-tx bytes:",
          sorted(set(re.findall(r"mbarrier\.arrive\.expect_tx\.shared(?:::cta)?\.b64 _, \[%r\d+\], (\d+);", ptx))))
    ok = True
    if md.shared > SMEM_LIMIT:
        print(f"SHARED MEMORY {md.shared} B exceeds the 227 KB of a CTA")
        ok = False
    if spills or not usage:
        print(f"SPILLS: {spills} bytes of local memory" if usage else "no cuobjdump figures: spills unknown")
        ok = False
    return ok, {"reg": reg, "warps": md.num_warps, "setmaxnreg": regs}
