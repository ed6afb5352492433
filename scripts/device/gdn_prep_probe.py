#!/usr/bin/env python3
"""Where _prep64_kernel's time goes, by leaving one part out (GPU, one process): the prep alone, timed
with triton.testing.do_bench (median, L2 cleared between runs) for the baseline and for copies of it
with P not formed, the inverse not applied (Tb = A's blocks: the series and substitution are dead code
then), or the block substitution below the diagonal blocks left out. The differences say which lever
is larger: moving P into the forward (as FlashQLA's fused forward forms Q Kᵀ) or a cheaper inverse
(issue 38). The copies are wrong on purpose: only their time means anything.

    python3 scripts/device/gdn_prep_probe.py [--shapes G1,G5,G8,G10]
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# the prep's own switch (what the Gluon forward's prep runs): no q load, no Q K^T, no P or f stores
_NO_P = [('WITH_P=cfg["fwd"] == "triton"', "WITH_P=False")]
_NO_INV = [("    tl.store(p_tb + o_r4 * (HV * BT) + o_c4, (b_tt * b_bc)",
            "    tl.store(p_tb + o_r4 * (HV * BT) + o_c4, (b_a4 * b_bc)")]
_NO_SUBST = [("    b_tt = tl.where(i_c4 == i_r4 - 3, b_f3[:, :, None, :], 0.0)\n",
              "    b_tt = b_t[:, :, None, :] * 0.0\n"),
             ("    b_tt = tl.where(i_c4 == i_r4 - 2, b_f2[:, :, None, :], b_tt)\n", ""),
             ("    b_tt = tl.where(i_c4 == i_r4 - 1, b_f1[:, :, None, :], b_tt)\n", "")]
EDITS = {"no P": _NO_P, "no inverse": _NO_INV, "no substitution": _NO_SUBST, "no P, no inverse": _NO_P + _NO_INV}


def variants(source: str) -> dict[str, str]:
    """The baseline and its leave-one-out copies; ValueError naming an edit the baseline no longer matches."""
    out = {"baseline": source}
    for name, edits in EDITS.items():
        s = source
        for old, new in edits:
            if old not in s:
                raise ValueError(f"{name}: the baseline no longer has {old.strip()[:70]!r}: update the probe")
            s = s.replace(old, new)
        out[name] = s
    return out


def main() -> None:
    import torch
    import triton

    from aka.contract.ops import get_op, load_module

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="G1,G5,G8,G10")
    args = ap.parse_args()
    op = get_op("gdn_prefill")
    tmp = Path(tempfile.mkdtemp(prefix="aka-prep-probe-"))
    mods = {}
    for i, (name, src) in enumerate(variants(op.path("baseline").read_text()).items()):
        (tmp / f"v{i}.py").write_text(src)
        mods[name] = load_module(tmp / f"v{i}.py")
    cases = {c.id: c for c in op.cases("full")}
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, "triton", triton.__version__)
    print("prep alone, µs (median)   " + "".join(f"{n:>18}" for n in mods))
    for sid in args.shapes.split(","):
        x = op.inputs.make_inputs(cases[sid], 0, "cuda")
        q, k, cu = x["q"], x["k"], x["cu_seqlens"].to(torch.int32)
        g, beta = x["g"].float().contiguous(), x["beta"].float().contiguous()
        T, _, D = q.shape
        HV, N = g.shape[1], cu.numel() - 1
        row = []
        for m in mods.values():
            cuc = torch.zeros(N + 1, dtype=torch.int32, device="cuda")
            cus = torch.zeros_like(cuc)  # the prep writes both (its first program)
            nt = sum(-(-n // 64) for n in cu.diff().tolist())
            tb = torch.empty(T, HV, 64, dtype=torch.bfloat16, device="cuda")
            pb, fd = torch.empty_like(tb), torch.empty(T, HV, dtype=torch.float32, device="cuda")
            block = max(16, triton.next_power_of_2(N))
            call = functools.partial(m._prep, q, k, g, beta, cu, cuc, cus, tb, pb, fd, N, 10**6, D**-0.5, block, nt,
                                     m.CONFIG)
            call()
            torch.cuda.synchronize()
            row.append(triton.testing.do_bench(call, warmup=50, rep=300, return_mode="median") * 1000)
        print(f"{sid:<26}" + "".join(f"{us:18.1f}" for us in row), flush=True)


if __name__ == "__main__":
    main()
