#!/usr/bin/env python3
"""Screen gdn_prefill CONFIG variants on the GPU, each in a process of its own (a variant that faults
takes only its own CUDA context down), beside fla in the same call.

Per variant and shape: a float64 check (kernels/gdn_prefill/reference.py, chunked form) on the first
input set, then eager and CUDA-graph-replay medians over --reps calls rotating --nrot input sets, a
256 MB L2 flush before every timed call, CUDA events; and at --profile-shape the per-kernel GPU time
(torch profiler, mean of 5 calls). A screen, not the published comparison: `aka bench` is that.

    python3 scripts/device/gdn_variants.py --variants default,ks,ks_pf --shapes G1,G5,G4 [--fla] [--flashqla]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("FLA_FLASH_QLA", "0")


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _time(torch, fn, inputs, reps, flush, graph):
    """Median µs of fn over reps calls rotating the input sets (graph: one captured graph per set)."""
    calls = [lambda inp=inp: fn(**inp) for inp in inputs]
    for c in calls:
        c()
    torch.cuda.synchronize()
    if graph:
        from scripts.devtiming import capture

        calls = [capture(c).replay for c in calls]
        for c in calls:
            c()
    out = []
    for i in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        calls[i % len(calls)]()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return _median(out)


def _profile(torch, fn, inp):
    from torch.profiler import ProfilerActivity, profile

    fn(**inp)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn(**inp)
        torch.cuda.synchronize()
    per = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name[:40]] += getattr(ev, "device_time_total", 0.0) / 5
    return {k: round(v, 1) for k, v in sorted(per.items(), key=lambda kv: -kv[1])}


def child(args) -> None:
    import torch

    from scripts.bench_gdn_prefill import SHAPES, VARIANTS, D, fla_fn, make_inputs, ref64, rel

    name = args.child
    if name == "fla":
        run = fla_fn()

        def fn(**inp):
            return run(**inp)
    elif name == "flashqla":  # same call shape as fla ([1, T, H, D] views, int64 cu_seqlens)
        from kernels.gdn_prefill.competitors import _flashqla_entry

        qla = _flashqla_entry()

        def fn(q, k, v, g, beta, cu_seqlens, initial_state=None, cu64=None):
            o, s = qla(q[None], k[None], v[None], g[None], beta[None], scale=D**-0.5,
                       initial_state=initial_state, output_final_state=True, cu_seqlens=cu64)
            return o[0], s
    else:
        from kernels.gdn_prefill import baseline as mod

        cfg = dict(mod.CONFIG, **VARIANTS[name], **json.loads(args.set or "{}"))

        def fn(q, k, v, g, beta, cu_seqlens, initial_state=None, cu64=None):
            return mod.forward(q, k, v, g, beta, cu_seqlens, initial_state, None, cfg)

    if args.warm_only:  # compile every specialisation the timed run will meet, then leave
        for sid in args.shapes.split(","):
            hk, hv, lens, h0 = SHAPES[sid]
            fn(**make_inputs(hk, hv, lens, h0, 0, "cuda"))
        torch.cuda.synchronize()
        return
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for sid in args.shapes.split(","):
        hk, hv, lens, h0 = SHAPES[sid]
        inputs = [make_inputs(hk, hv, lens, h0, seed, "cuda") for seed in range(args.nrot)]
        rec = {"variant": name, "shape": sid}
        t0 = time.time()
        o, s = fn(**inputs[0])
        torch.cuda.synchronize()
        if sum(lens) <= args.ref_max_tokens:
            ro, rs = ref64(**{n: x for n, x in inputs[0].items() if n != "cu64"})
            rec["err_o"], rec["err_s"] = round(rel(o, ro), 6), round(rel(s, rs), 6)
            del ro, rs
        del o, s
        rec["eager_us"] = round(_time(torch, fn, inputs, args.reps, flush, False), 1)
        rec["graph_us"] = round(_time(torch, fn, inputs, args.reps, flush, True), 1)
        if sid in args.profile_shapes.split(","):
            rec["kernels_us"] = _profile(torch, fn, inputs[0])
        rec["wall_s"] = round(time.time() - t0, 1)
        print("ROW " + json.dumps(rec), flush=True)
        del inputs
        torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default="default")
    ap.add_argument("--shapes", default="G1,G5,G4")
    ap.add_argument("--fla", action="store_true", help="time fla 0.6 (Triton path) as one more variant")
    ap.add_argument("--flashqla", action="store_true", help="time FlashQLA (flash_qla) as one more variant")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--nrot", type=int, default=2)
    ap.add_argument("--ref-max-tokens", type=int, default=16384)
    ap.add_argument("--profile-shapes", default="G1")
    ap.add_argument("--set", default="", help="JSON CONFIG overrides for every variant")
    ap.add_argument("--timeout", type=float, default=150.0, help="wall cap of one variant's process")
    ap.add_argument("--child", default="")
    ap.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    # the competitors first: a call's time cap that cuts the run then cuts a variant, not the reference
    # every variant is compared with (2026-12-01: fla, last, was cut and the call lost its comparison)
    names = (["fla"] if args.fla else []) + (["flashqla"] if args.flashqla else []) + args.variants.split(",")
    rows = []
    out = os.environ.get("OUT")
    t0 = time.time()
    # JIT first, all variants at once (the device has the cores; nothing is timed while they compile)
    warm = [subprocess.Popen([sys.executable, __file__, "--child", n, "--shapes", args.shapes, "--set", args.set,
                              "--warm-only"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in names]
    for w in warm:
        try:
            w.wait(timeout=max(1.0, args.timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            w.kill()
    print(f"compiled {len(names)} variants in {time.time() - t0:.0f} s", flush=True)
    for name in names:
        cmd = [sys.executable, __file__, "--child", name, "--shapes", args.shapes, "--reps", str(args.reps),
               "--nrot", str(args.nrot), "--ref-max-tokens", str(args.ref_max_tokens),
               "--profile-shapes", args.profile_shapes, "--set", args.set]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            text, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as exc:
            raw = exc.stdout or b""
            text, rc = (raw.decode() if isinstance(raw, bytes) else raw), "timeout"
        got = [json.loads(line[4:]) for line in text.splitlines() if line.startswith("ROW ")]
        rows += got
        for r in got:
            ks = r.get("kernels_us")
            top = ", ".join(f"{k} {v}" for k, v in list(ks.items())[:5]) if ks else ""
            print(f"{name:>16} {r['shape']:>4} eager {r['eager_us']:8.1f} graph {r['graph_us']:8.1f}"
                  f" err o {r.get('err_o', float('nan')):.2e} s {r.get('err_s', float('nan')):.2e} {top}", flush=True)
        if rc != 0:
            tail = " | ".join(text.strip().splitlines()[-3:])[:400]
            print(f"{name:>16} exit {rc} after {time.time() - t0:.0f} s: {tail}", flush=True)
        if out:  # after every variant, so a cut call keeps what it measured
            Path(out, "gdn_variants.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
