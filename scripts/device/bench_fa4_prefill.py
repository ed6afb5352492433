"""Device benchmark for kernels/fa4_prefill/baseline.py (run on the H200; never imported by aka/).

For every full-set shape P1..P30: correctness against float64 (a subsample of query rows of every
sequence, all heads — a full fp64 reference at T = 32k would need a 137 GB score matrix), then
timing of ours and torch SDPA side by side: medians over many calls, L2 flushed (a 256 MB write)
before each call, CUDA events. SDPA runs on the same data gathered to dense K/V (gather not timed,
K/V expanded to Hq heads), one batched call per group of equal (q_len, prefix) sequences:
is_causal=True without prefix, torch's causal_lower_right bias with one (skipped if refused).

    python scripts/device/bench_fa4_prefill.py [--sweep] [--shapes P1,P5] [--iters 30]

--sweep first times CONFIG candidates on P6 and keeps the fastest correct one for the table.
Prints a compact table last; writes markdown + a JSON log to $OUT when set.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback

import torch
from devtiming import bench, bench_graph, fmt  # scripts/ is on sys.path when run as a script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CPU = os.environ.get("FA4_BENCH_CPU") == "1"  # dry run of this script in the interpreter (tiny shapes)
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"
    from aka.evaluate.host.interp import install_bf16_dot_shim

    install_bf16_dot_shim()
DEV = "cpu" if CPU else "cuda"
SCRATCH = os.environ.get("FA4_SCRATCH", "/tmp/fa4_scratch")
os.makedirs(SCRATCH, exist_ok=True)
mod = importlib.import_module("kernels.fa4_prefill.baseline")

D, PAGE = 256, 64
P23 = [1796, 793, 371, 234, 1412, 828, 1067, 976, 1285, 933, 466, 1686, 593, 747, 1110, 2087]
SHAPES = {  # id -> (q_lens, prefixes, hq, hkv); P0 / P0p: one new token (the issue-18 fixed-cost probes)
    "P0": ([1], None), "P0p": ([1], [4095]),
    "P1": ([512], None), "P2": ([1024], None), "P3": ([2048], None), "P4": ([4096], None),
    "P5": ([4224], None), "P6": ([8192], None), "P7": ([16384], None), "P8": ([32768], None),
    "P9": ([4096] * 2, None), "P10": ([2048] * 4, None), "P11": ([1024] * 8, None),
    "P12": ([512] * 16, None), "P13": ([4224] * 4, None), "P14": ([4096] * 8, None),
    "P15": ([2048], [2048]), "P16": ([2048], [8192]), "P17": ([4096], [12288]),
    "P18": ([512], [16384]), "P19": ([8192], [24576]), "P20": ([1024], [31744]),
    "P21": ([333, 1500, 4224, 7000], None), "P22": ([1, 63, 64, 65, 127, 128, 129, 4097], None),
    "P23": (P23, None), "P24": ([8192] + [512] * 8, None),
    "P25": ([512, 2048, 1024, 4224], [7680, 0, 3072, 0]),
    "P26": ([8192], None, 16, 2), "P27": ([8192], None, 8, 1), "P28": ([8192], None, 32, 2),
    "P29": ([8192], None, 24, 4), "P30": ([8192], None, 16, 4),
}
if CPU:
    SHAPES = {"C1": ([70, 5], [30, 0], 4, 2), "C2": ([65], None, 2, 1), "C3": ([64, 64], None, 2, 1)}

SWEEP = [  # CONFIG candidates (merged over the module's CONFIG); the committed CONFIG first
    dict(),
    # 2026-12-02 (issue 18): two 4-warp programs per SM instead of one 8-warp program, so one
    # program's softmax can overlap the other's wgmma (ptxas sm_90, Triton 3.6: 255 regs, 32 / 8 / 88 B
    # stack, 98 KB smem each)
    dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2),
    dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2, WARP_SPEC=False),
    dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=3),
    dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=1),
    # one 8-warp program, three smaller K/V stages in flight (131 KB smem)
    dict(BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=3),
]
# Automatic warp specialisation (tl.range(warp_specialize=True)) is experimental on Hopper: probed in
# its own process first (--ws-probe) so a compiler crash cannot take the main run down.
SWEEP_WS = [
    dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2, WARP_SPEC=True),
    dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2, WARP_SPEC=True, USE_TMA=True),
]
SWEEP_SHAPES = ["C2"] if CPU else ["P5", "P7"]


def spec(sid):
    s = SHAPES[sid]
    q_lens, prefixes = s[0], s[1] or [0] * len(s[0])
    hq, hkv = (s[2], s[3]) if len(s) > 2 else (16, 1)
    return q_lens, prefixes, hq, hkv


def flops(q_lens, prefixes, hq):
    vis = sum(q * p + q * (q + 1) // 2 for q, p in zip(q_lens, prefixes))
    return 4.0 * D * hq * vis


def make_case(q_lens, prefixes, hq, hkv, seed=0, dev=DEV):
    g = torch.Generator(device=dev).manual_seed(seed)
    kv_lens = [q + p for q, p in zip(q_lens, prefixes)]
    pages_per = [-(-kv // PAGE) for kv in kv_lens]
    num_pages = sum(pages_per) + max(8, sum(pages_per) // 16)  # unused pages in the pool
    perm = torch.randperm(num_pages, device=dev, generator=g).to(torch.int32)
    pt = torch.zeros(len(q_lens), max(pages_per), dtype=torch.int32, device=dev)
    used = 0
    for i, n in enumerate(pages_per):
        pt[i, :n] = perm[used:used + n]
        used += n
    k = torch.randn(num_pages, PAGE, hkv, D, device=dev, generator=g, dtype=torch.bfloat16)
    v = torch.randn(num_pages, PAGE, hkv, D, device=dev, generator=g, dtype=torch.bfloat16)
    # Poison what no sequence owns (spare pages, slots past kv_len): a stray read gives NaN.
    owned = torch.zeros(num_pages * PAGE, dtype=torch.bool, device=dev)
    for i, kv in enumerate(kv_lens):
        slots = (pt[i, : pages_per[i]].long()[:, None] * PAGE + torch.arange(PAGE, device=dev)).flatten()[:kv]
        owned[slots] = True
    k.view(-1, hkv, D)[~owned] = float("nan")
    v.view(-1, hkv, D)[~owned] = float("nan")
    q = torch.randn(sum(q_lens), hq, D, device=dev, generator=g, dtype=torch.bfloat16)
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32, device=dev)
    return dict(q=q, k_cache=k, v_cache=v, page_table=pt, cu_seqlens_q=cu,
                kv_lens=torch.tensor(kv_lens, dtype=torch.int32, device=dev))


def dense_kv(case, s, kv):
    pages = case["page_table"][s, : -(-kv // PAGE)].long()
    hkv = case["k_cache"].shape[2]
    k = case["k_cache"][pages].reshape(-1, hkv, D)[:kv]
    v = case["v_cache"][pages].reshape(-1, hkv, D)[:kv]
    return k, v


def sample_rows(ql, n=48, seed=0):
    if ql <= n:
        return torch.arange(ql)
    g = torch.Generator().manual_seed(seed)
    mid = torch.randperm(ql - 16, generator=g)[: n - 16] + 8
    return torch.cat([torch.arange(8), mid.sort().values, torch.arange(ql - 8, ql)])


def check(case, outs, q_lens, prefixes, hq, hkv):
    """Relative L2 (over the sampled rows) of each output in outs against float64."""
    num = {k: 0.0 for k in outs}
    den = 0.0
    g = hq // hkv
    cu = case["cu_seqlens_q"].tolist()
    for s, (ql, p) in enumerate(zip(q_lens, prefixes)):
        kv = ql + p
        k, v = dense_kv(case, s, kv)
        k, v = k.double(), v.double()
        rows = sample_rows(ql, seed=s).to(k.device)
        qs = case["q"][cu[s] + rows].double()  # [R, hq, D]
        r = rows.numel()
        qh = qs.view(r, hkv, g, D).permute(1, 0, 2, 3).reshape(hkv, r * g, D)
        sc = qh @ k.permute(1, 2, 0) * (D ** -0.5)  # [hkv, r*g, kv]
        qpos = (p + rows).repeat_interleave(g)
        sc.masked_fill_(torch.arange(kv, device=k.device)[None, None, :] > qpos[None, :, None], float("-inf"))
        ref = (sc.softmax(-1) @ v.permute(1, 0, 2)).view(hkv, r, g, D).permute(1, 0, 2, 3).reshape(r, hq, D)
        den += ref.square().sum().item()
        for name, o in outs.items():
            num[name] += (o[cu[s] + rows].double() - ref).square().sum().item()
    return {k: (num[k] / den) ** 0.5 for k in outs}


def sdpa_fn(case, q_lens, prefixes, hq, hkv):
    """Dense SDPA, one call per group of equal (q_len, prefix); gathered K/V built here (not timed)."""
    import torch.nn.functional as F

    cu = case["cu_seqlens_q"].tolist()
    groups = {}
    for s, key in enumerate(zip(q_lens, prefixes)):
        groups.setdefault(key, []).append(s)
    calls = []
    for (ql, p), seqs in groups.items():
        kv = ql + p
        ks, vs = zip(*(dense_kv(case, s, kv) for s in seqs))
        k = torch.stack(ks).repeat_interleave(hq // hkv, 2).transpose(1, 2).contiguous()  # [B, hq, kv, D]
        v = torch.stack(vs).repeat_interleave(hq // hkv, 2).transpose(1, 2).contiguous()
        idx = torch.cat([torch.arange(cu[s], cu[s + 1]) for s in seqs]).to(k.device)
        q = case["q"][idx].view(len(seqs), ql, hq, D).transpose(1, 2).contiguous()
        if p == 0:
            kw = dict(is_causal=True)
        else:
            from torch.nn.attention.bias import causal_lower_right

            kw = dict(attn_mask=causal_lower_right(ql, kv))
        calls.append((q, k, v, kw, idx, len(seqs), ql))
    out = torch.empty_like(case["q"])

    def run():
        for q, k, v, kw, idx, b, ql in calls:
            o = F.scaled_dot_product_attention(q, k, v, **kw)
            out[idx] = o.transpose(1, 2).reshape(b * ql, hq, D)
        return out

    return run


def iters_for(fl):
    est_us = fl / 400e12 * 1e6 + 10
    return int(max(5, min(50, 300e3 / est_us)))


def run_shape(sid, iters=None, with_sdpa=True, check_err=True):
    q_lens, prefixes, hq, hkv = spec(sid)
    case = make_case(q_lens, prefixes, hq, hkv, seed=int("".join(c for c in sid if c.isdigit())) + len(sid))
    fl = flops(q_lens, prefixes, hq)
    n = iters or iters_for(fl)
    row = dict(id=sid, hq=hq, hkv=hkv, n_seq=len(q_lens), T=sum(q_lens), prefix=sum(prefixes), gflop=fl / 1e9)
    ours = lambda: mod.fa4_prefill(**case)  # noqa: E731
    o = ours()
    if not CPU:
        torch.cuda.synchronize()
    row["nan"] = bool(torch.isnan(o).any().item())
    outs = {"ours": o}
    sd = None
    if with_sdpa:
        try:
            sd = sdpa_fn(case, q_lens, prefixes, hq, hkv)
            outs["sdpa"] = sd().clone()
        except Exception as e:  # noqa: BLE001
            row["sdpa_note"] = f"{type(e).__name__}: {str(e)[:80]}"
            sd = None
    if check_err:
        errs = check(case, outs, q_lens, prefixes, hq, hkv)
        row["err"] = errs["ours"]
        row["err_sdpa"] = errs.get("sdpa")
    row["us"] = bench(ours, n)
    row["tflops"] = fl / row["us"] / 1e6
    if with_sdpa and fl < 1200e9:  # also time without host launch cost (eager vs graph, issue 18)
        row["graph_us"] = bench_graph(ours, n)
    if sd is not None:
        row["sdpa_us"] = bench(sd, n)
        row["sdpa_tflops"] = fl / row["sdpa_us"] / 1e6
        row["ratio"] = row["us"] / row["sdpa_us"]
    del case, outs
    if not CPU:
        torch.cuda.empty_cache()
    return row


def sweep(cands):
    """Time each candidate on SWEEP_SHAPES; keep the best mean TF/s among the correct ones."""
    base = dict(mod.CONFIG)
    results = []
    for cand in cands:
        cfg = dict(base, **cand)
        mod.CONFIG.clear()
        mod.CONFIG.update(cfg)
        t0 = time.time()
        try:
            rs = [run_shape(sid, iters=10, with_sdpa=False) for sid in SWEEP_SHAPES]
            ok = all(r["err"] <= 1e-2 and not r["nan"] for r in rs)
            score = sum(r["tflops"] for r in rs) / len(rs)
            results.append((score if ok else -1.0, cfg, rs))
            print(f"sweep {cand} -> mean {score:.0f} TF/s " + " ".join(
                f"{r['id']}:{r['us']:.1f}us/{r['tflops']:.0f}TF/err{r['err']:.1e}" for r in rs)
                + f" ({time.time() - t0:.1f}s)", flush=True)
            print("   ", kernel_resources()[-1:], flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"sweep {cand} FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
    results.sort(key=lambda x: -x[0])
    best = results[0][1] if results and results[0][0] > 0 else base
    mod.CONFIG.clear()
    mod.CONFIG.update(best)
    print("sweep best CONFIG:", best, flush=True)
    return [(sc, c, [dict(id=r["id"], us=r["us"], tflops=r["tflops"]) for r in rs]) for sc, c, rs in results]


def kernel_resources():
    """Registers / spills / shared memory of the compiled kernels (Triton internals; best effort)."""
    out = []
    try:
        for fn in (mod._fa4_prefill_kernel,):
            for cache in fn.device_caches.values():
                for ck in cache[0].values():
                    out.append(f"{ck.name} w{ck.metadata.num_warps} s{ck.metadata.num_stages}: regs {ck.n_regs} spills {ck.n_spills} smem {ck.metadata.shared}")
    except Exception as e:  # noqa: BLE001
        out.append(f"(resources unavailable: {type(e).__name__})")
    return out


def table(rows):
    hdr = ("| id | Hq/Hkv | seqs | T new | prefix | GFLOP | ours µs | TF/s | ours graph µs | SDPA µs | SDPA TF/s "
           "| ours/SDPA | err | SDPA err |")
    lines = [hdr, "|" + "---|" * 14]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['id']} | FAILED: {r['error']} |")
            continue
        lines.append(
            f"| {r['id']} | {r['hq']}/{r['hkv']} | {r['n_seq']} | {r['T']} | {r['prefix']} | {r['gflop']:.1f} | "
            f"{r['us']:.1f} | {r['tflops']:.0f} | {fmt(r.get('graph_us'))} | {fmt(r.get('sdpa_us'))} | {fmt(r.get('sdpa_tflops'), '{:.0f}')} | "
            f"{fmt(r.get('ratio'), '{:.2f}')} | {r['err']:.1e}{' NaN!' if r['nan'] else ''} | "
            f"{fmt(r.get('err_sdpa'), '{:.1e}')} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--ws-probe", action="store_true", help="only time the warp-specialised candidates")
    args = ap.parse_args()
    import triton

    env = (f"{'cpu-interpreter' if CPU else torch.cuda.get_device_name()} | torch {torch.__version__} | triton {triton.__version__} | "
           f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(env, flush=True)
    out = os.environ.get("OUT")
    if args.ws_probe:
        res = sweep(SWEEP_WS)
        if out and any(sc > 0 for sc, _, _ in res):
            with open(os.path.join(SCRATCH, "ws_ok.json"), "w") as f:
                json.dump([c for sc, c, _ in res if sc > 0], f)
        return
    cands = list(SWEEP)
    if out and os.path.exists(os.path.join(SCRATCH, "ws_ok.json")):
        with open(os.path.join(SCRATCH, "ws_ok.json")) as f:
            cands += json.load(f)
    sw = sweep(cands) if args.sweep else []
    rows = []
    t0 = time.time()
    for sid in args.shapes.split(","):
        try:
            r = run_shape(sid, iters=args.iters)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            r = dict(id=sid, error=f"{type(e).__name__}: {str(e)[:120]}")
            if not CPU:
                torch.cuda.empty_cache()
        rows.append(r)
        print(json.dumps(r), f"[{time.time() - t0:.0f}s]", flush=True)
        if os.environ.get("OUT"):  # incremental: survives a timeout (kept off $OUT: 8 files come back)
            with open(os.path.join(SCRATCH, "prefill_rows.jsonl"), "a") as f:
                f.write(json.dumps(r) + "\n")
    md = f"# fa4_prefill\n\n{env}\n\nCONFIG: `{mod.CONFIG}`\n\n" + table(rows) + "\n"
    if sw:
        md += f"\nSweep ({', '.join(SWEEP_SHAPES)}; score = mean TF/s):\n\n" + "\n".join(
            f"* `{c}`: {sc:.0f} " + " ".join(f"{r['id']} {r['us']:.1f}µs" for r in rs) for sc, c, rs in sw) + "\n"
    for line in kernel_resources():
        print(line, flush=True)
    if out:
        with open(os.path.join(out, "fa4_prefill.md"), "w") as f:
            f.write(md)
        with open(os.path.join(SCRATCH, "fa4_prefill.json"), "w") as f:
            json.dump(dict(env=env, config=mod.CONFIG, rows=rows, sweep=sw), f)
    print(md, flush=True)


if __name__ == "__main__":
    main()
