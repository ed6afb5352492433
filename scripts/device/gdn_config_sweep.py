#!/usr/bin/env python3
"""GPU time of gdn_prefill modules under CONFIG variants, shape by shape (GPU, one process).

For a first look at a knob before the loop spends gated candidates on it: each variant's call is captured
in a CUDA graph per shape and replayed with the L2 flushed and the GPU busy before the start event (aka
bench's GraphTimer), median of --iters replays; variants alternate within each round so drift hits all
alike. Not a gate: outputs are compared to the first variant's only as a sanity line (max |do|).

    python3 scripts/device/gdn_config_sweep.py --shapes G1,G8 --variants "cp=False;cp_segment_chunks=32"
    python3 scripts/device/gdn_config_sweep.py --kernel baseline,old.py      # two modules side by side

A variant is key=value pairs separated by ',' (values parsed as Python literals); ';' separates variants;
the empty variant (the baseline's CONFIG) always runs first. The key cp_segment_chunks is the entry's
argument (segments of exactly that many chunks, CP forced), not a CONFIG key.
"""

from __future__ import annotations

import argparse
import ast
import functools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _variants(text: str) -> list[dict]:
    out: list[dict] = [{}]
    for part in filter(None, (p.strip() for p in text.split(";"))):
        out.append({k.strip(): ast.literal_eval(v.strip()) for k, v in (kv.split("=", 1) for kv in part.split(","))})
    return out


def main() -> None:
    import torch

    from aka.contract.ops import get_op, load_module
    from aka.evaluate.host.bench import GraphTimer, l2_bytes

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="G1,G2,G3,G4,G5,G6,G7,G8,G9,G10")
    ap.add_argument("--variants", default="")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--kernel", default="baseline", help="module paths, comma-separated ('baseline': the op's)")
    args = ap.parse_args()
    op = get_op("gdn_prefill")
    paths = [op.path("baseline") if k == "baseline" else Path(k) for k in args.kernel.split(",")]
    mods = [load_module(p) for p in paths]
    variants = _variants(args.variants)
    for mod, path in zip(mods, paths):
        unknown = {k for v in variants for k in v} - set(mod.CONFIG) - {"cp_segment_chunks"}
        if unknown:
            sys.exit(f"gdn_config_sweep: {path.name} has no CONFIG keys {sorted(unknown)}; it has {sorted(mod.CONFIG)}")
    runs = [(mod, var) for mod in mods for var in variants]
    names = [f"{path.stem} {var or 'CONFIG'}" for path in paths for var in variants]
    timer = GraphTimer(2 * l2_bytes())
    full = {c.id: c for c in op.cases("full")}
    print("| shape | " + " | ".join(names) + " |", flush=True)
    for sid in args.shapes.split(","):
        x = op.inputs.make_inputs(full[sid], 0, "cuda")
        replays, outs = [], []
        for mod, var in runs:
            cfg = {**mod.CONFIG, **var}
            seg = cfg.pop("cp_segment_chunks", None)
            call = functools.partial(mod.forward, **{"initial_state": None, "scale": None, **x}, cfg=cfg,
                                     cp_segment_chunks=seg)
            outs.append([t.clone() for t in call()])
            call()
            torch.cuda.synchronize()
            replays.append(timer.capture([call])[0])
        times: list[list[float]] = [[] for _ in runs]
        for _ in range(args.iters):
            for i, rep in enumerate(replays):
                times[i].append(timer.measure(rep))
        meds = [statistics.median(t) for t in times]
        diff = [max(float((a.float() - b.float()).abs().max()) for a, b in zip(o, outs[0])) for o in outs]
        cells = [f"{m:.1f} ({meds[0] / m:.3f}x, d {d:.0e})" for m, d in zip(meds, diff)]
        print(f"| {sid} | " + " | ".join(cells) + " |", flush=True)
        del replays, outs
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
