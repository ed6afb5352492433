"""One device call: check kernels/gdn_prefill/baseline.py on G1..G10 against a float64 recurrence,
then time it (and CONFIG variants) beside fla 0.6.0's chunk_gated_delta_rule (Triton path).

Timing: aka.evaluate.host.bench's CudaTimer and time_interleaved (the harness of `aka bench`): fla and every variant
are timed in alternating blocks of 5 calls (so drift hits all alike); before every call the L2 is
flushed (256 MB buffer write, > 4x the 60 MB L2), the device is synchronised, and CUDA events bracket
the call; inputs rotate over NROT copies; median of up to --reps calls per implementation.
Extra memory = peak allocated during the call - allocated before - outputs.
Prints one line per shape as it finishes (so a call cut off at its limit still shows what ran) and
the full tables last; writes markdown + JSON under $OUT when OUT is set.

Time caps, so one ~100 s device call covers G1..G10 for three variants beside fla: each
implementation stops adding calls after --section-s of its own timing (10 calls at least); once --budget-s
has passed, the remaining shapes are skipped and the tables are printed. The float64 reference is
computed once per shape and shared by every variant (--ref-max-tokens skips it on longer shapes).

Run on the device machine (fla carried as a wheel, FLA_FLASH_QLA=0):
    python3 scripts/device/bench_gdn_prefill.py --variants default,split,split_nopp --budget-s 90
Offline (CPU, no GPU): registers / spill stack / shared memory of both structures for sm_90 (with
--prep-only: the prep kernels' table alone):
    python3 scripts/device/bench_gdn_prefill.py --offline-regs [--prep-only]
Prep kernel alone, per variant (--prep-only; Tb of each variant compared with the first's), and on CPU
the Tb error of the prep algorithms with tf32 rounding emulated (--emulate-prep).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

SHAPES = {  # id: (HK, HV, seqlens, initial_state)
    "G1": (16, 32, [8192], False),
    "G2": (16, 32, [4096], False),
    "G3": (16, 32, [16384], False),
    "G4": (16, 32, [32768], False),
    "G5": (16, 32, [2048] * 4, False),
    "G6": (16, 32, [1024, 7168], False),
    "G7": (16, 32, [1024] * 8, True),
    "G8": (16, 64, [8192], False),
    "G9": (16, 48, [8192], False),
    "G10": (4, 16, [16384], False),
}
# published H200 forward ms (FlashQLA benchmark table, fla 0.5.1, CUDA graphs): QLA / FlashInfer / FLA
PUBLISHED = {
    "G1": (0.280, 0.394, 0.472), "G2": (0.173, 0.201, 0.247), "G3": (0.472, 0.779, 0.930),
    "G4": (0.877, 1.550, 1.890), "G5": (0.167, 0.111, 0.485), "G6": (0.282, 0.346, 0.476),
    "G7": (0.178, 0.119, 0.501), "G8": (0.397, 0.392, 0.814), "G9": (0.410, 0.393, 0.665),
    "G10": (0.302, 0.830, 0.614),
}
VARIANTS = {  # name: CONFIG overrides
    "default": {},
    # split structure (_rec_kernel + _out_kernel); P from the prep kernel, or computed in _out_kernel
    "split": {"fuse_output": False},
    "split_nopp": {"fuse_output": False, "pre_p": False},
    "split_bv32w4": {"fuse_output": False, "pre_p": False, "rec_BV": 32, "rec_warps": 4},
    "split_st2": {"fuse_output": False, "pre_p": False, "rec_stages": 2},
    "fused": {"fuse_output": True},
    "nocp_": {"cp": False},
    "bv64w8": {"BV": 64, "fwd_warps": 8},
    "nocp": {"cp": False},
    "cp1024": {"cp_target_programs": 1024, "cp_min_seg_chunks": 4},
    "no_pre_p": {"pre_p": False},
    "bv64w4": {"BV": 64},
    "cp256": {"cp_target_programs": 256, "cp_min_seg_chunks": 16},
    "cpall": {"cp_min_programs": 1056},
    "st1": {"fwd_stages": 1, "seg_stages": 1},
    "w8st1": {"fwd_warps": 8, "fwd_stages": 1, "seg_stages": 1},
    "bv64w8st1": {"BV": 64, "fwd_warps": 8, "fwd_stages": 1, "seg_stages": 1},
    "no_pre_p_st1": {"pre_p": False, "fwd_stages": 1, "seg_stages": 1},
    "st3": {"fwd_stages": 3, "seg_stages": 3},
    "bva128w8": {"BVA": 128, "seg_warps": 8},
    "bva32": {"BVA": 32},
    # CP warm-up (2026-12-01): the exact [M | C] path for every segment, as before the warm-up
    "nowarm": {"cp_warm_chunks": 0},
    "warm32": {"cp_warm_chunks": 32},
    "cp2048": {"cp_target_programs": 2048, "cp_min_seg_chunks": 4},
    "cpall2048": {"cp_min_programs": 1056, "cp_target_programs": 2048, "cp_min_seg_chunks": 4},
    "tf32": {"prep_prec": "tf32"},
    # split with rec_algo "wu" (prepared 2026-12-01, to time first next session): W / U made in
    # parallel, the state kernel shaped like fla's (two 64-row halves, K^T loaded transposed)
    "split_wu": {"fuse_output": False, "rec_algo": "wu"},
    "split_wu_st2": {"fuse_output": False, "rec_algo": "wu", "rec_stages": 2},
    "split_wu_w4": {"fuse_output": False, "rec_algo": "wu", "rec_warps": 4, "rec_stages": 2},
    "split_wu_w4_bv32": {"fuse_output": False, "rec_algo": "wu", "rec_warps": 4, "rec_BV": 32, "rec_stages": 2},
    # fwd_algo "ks" (2026-12-01, third session): V~ = Tb (V - e^gamma K S), FlashQLA's order (no W);
    # fwd_prefetch: the next chunk's tiles loaded before this chunk's dots
    # gate_f32 (2026-12-02, the default): gates on fp32 products, not bf16 operands; off = the order
    # measured before; with ks_split (x in bf16 hi + lo); with ieee merges in the prep
    "gf_off": {"gate_f32": False},
    "gq_row": {"gate_q": "row"},
    "gq_pdec": {"gate_q": "pdec"},
    "gq_pdec_p4": {"gate_q": "pdec", "prep_warps": 4},
    "gf_split": {"ks_split": True},
    "gf_ieee": {"prep_prec": "ieee"},
    "gf_ls1": {"fwd_loop_stages": 1},
    "gf_pf": {"fwd_prefetch": True, "fwd_loop_stages": 1},
    "ks": {"fwd_algo": "ks"},
    "ks_pf": {"fwd_algo": "ks", "fwd_prefetch": True},
    "ks_ls2": {"fwd_algo": "ks", "fwd_loop_stages": 2},
    "ks_bv32w4": {"fwd_algo": "ks", "BV": 32, "fwd_warps": 4},
    "ks_pf_bv32w4": {"fwd_algo": "ks", "fwd_prefetch": True, "BV": 32, "fwd_warps": 4},
    "ks_bv128": {"fwd_algo": "ks", "BV": 128},
    "ks_pf_bv128": {"fwd_algo": "ks", "fwd_prefetch": True, "BV": 128},
    "ks_pf_bv32w8": {"fwd_algo": "ks", "fwd_prefetch": True, "BV": 32, "fwd_warps": 8},
    "ks_bv32w8": {"fwd_algo": "ks", "BV": 32, "fwd_warps": 8},
    "new": {"fwd_algo": "ks", "fwd_loop_stages": 2, "fwd_warps": 4, "seg_algo": "ks", "seg_loop_stages": 2},
    "new_s3": {"fwd_algo": "ks", "fwd_loop_stages": 2, "fwd_warps": 4, "seg_algo": "ks", "seg_loop_stages": 3},
    # the default before 2026-12-01's third session (W algebra, 8 warps, no pipelining)
    "old_w": {"fwd_algo": "w", "fwd_warps": 8, "fwd_loop_stages": 1, "seg_algo": "w", "seg_loop_stages": 1},
    # prepared 2026-12-01 (third session), interpreter-tested, not timed: time these first
    "ks_split": {"ks_split": True},  # x = V - e^gamma K S in bf16 hi + lo (fla-level error)
    # knob screen of 2026-12-01 (fourth session), run with --set '{"ks_split": true}'
    "seg_ls2": {"seg_loop_stages": 2},
    "pst1": {"prep_stages": 1},
    "pw4": {"prep_warps": 4},
    "segmin4": {"cp_min_seg_chunks": 4},
    "segmin16": {"cp_min_seg_chunks": 16},
    "cpmin264": {"cp_min_programs": 264},
    "bvc64": {"BVC": 64},
    "fw8": {"fwd_warps": 8},
    "ls3": {"fwd_loop_stages": 3},
    "warm8": {"cp_warm_chunks": 8},
    "warm16": {"cp_warm_chunks": 16},  # the default before the screen above
    "new_sw": {"fwd_algo": "ks", "fwd_loop_stages": 2, "fwd_warps": 4, "seg_loop_stages": 2},
    "new_bva128": {"fwd_algo": "ks", "fwd_loop_stages": 2, "fwd_warps": 4, "seg_algo": "ks", "seg_loop_stages": 2,
                   "BVA": 128, "seg_warps": 8},
    "new_cp1024": {"fwd_algo": "ks", "fwd_loop_stages": 2, "fwd_warps": 4, "seg_algo": "ks", "seg_loop_stages": 2,
                   "cp_target_programs": 1024},
    "new_cp264": {"fwd_algo": "ks", "fwd_loop_stages": 2, "fwd_warps": 4, "seg_algo": "ks", "seg_loop_stages": 2,
                  "cp_target_programs": 264},
    "new_nocp": {"fwd_algo": "ks", "fwd_loop_stages": 2, "fwd_warps": 4, "cp": False},
    "new_pw4": {"fwd_algo": "ks", "fwd_loop_stages": 2, "fwd_warps": 4, "seg_algo": "ks", "seg_loop_stages": 2,
                "prep_warps": 4},
    "ks_ls3": {"fwd_algo": "ks", "fwd_loop_stages": 3},
    "ks_ls2_w4": {"fwd_algo": "ks", "fwd_loop_stages": 2, "fwd_warps": 4},
    "ks_ls3_w4": {"fwd_algo": "ks", "fwd_loop_stages": 3, "fwd_warps": 4},
    "ks_ls2_bv128": {"fwd_algo": "ks", "fwd_loop_stages": 2, "BV": 128},
    "ks_ls2_cp1024": {"fwd_algo": "ks", "fwd_loop_stages": 2, "cp_target_programs": 1024, "cp_min_seg_chunks": 4},
    "ks_ls2_cp264": {"fwd_algo": "ks", "fwd_loop_stages": 2, "cp_target_programs": 264},
    "split_cp2048": {"fuse_output": False, "cp_target_programs": 2048, "cp_min_seg_chunks": 4},
    "split_bv32_cp2048": {"fuse_output": False, "pre_p": False, "rec_BV": 32, "rec_warps": 4,
                          "cp_target_programs": 2048, "cp_min_seg_chunks": 4},
}
D = 128


def make_inputs(hk, hv, lens, h0, seed, dev):
    gen = torch.Generator(device=dev).manual_seed(seed)
    T = sum(lens)
    rn = lambda *s: torch.randn(*s, generator=gen, device=dev)  # noqa: E731
    q = torch.nn.functional.normalize(rn(T, hk, D), dim=-1).to(torch.bfloat16)
    k = torch.nn.functional.normalize(rn(T, hk, D), dim=-1).to(torch.bfloat16)
    v = rn(T, hv, D).to(torch.bfloat16)
    # Qwen gate: g = -exp(A_log) softplus(a + dt_bias), A in [1,16], dt log-uniform in [1e-3, 1e-1]
    A = 1 + 15 * torch.rand(hv, generator=gen, device=dev)
    dt = torch.exp(math.log(1e-3) + math.log(100) * torch.rand(hv, generator=gen, device=dev))
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    g = (-A * torch.nn.functional.softplus(rn(T, hv) + dt_bias)).contiguous()
    beta = torch.sigmoid(rn(T, hv)).contiguous()
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    init = 0.1 * rn(len(lens), hv, D, D) if h0 else None
    return dict(q=q, k=k, v=v, g=g, beta=beta, cu_seqlens=cu, initial_state=init, cu64=cu.long())


@torch.no_grad()
def ref64(q, k, v, g, beta, cu_seqlens, initial_state=None):
    """The project's float64 reference in its chunked form (kernels/gdn_prefill/reference.py; equal to
    the token recurrence to 1e-12 in the tests): ~13k launches at G4 instead of ~260k, so every shape
    can be checked inside the call's budget."""
    ref = importlib.import_module("kernels.gdn_prefill.reference")
    return ref.reference(q, k, v, g, beta, cu_seqlens, initial_state, D**-0.5, algorithm="chunked")


def rel(a, b):
    if b is None:
        return float("nan")
    return ((a.double() - b).norm() / b.norm()).item()


def row_line(rec, names):
    """One markdown row per shape, printed as soon as the shape is done."""
    f = rec.get("fla", {}).get("ms")
    cells = []
    for n in names:
        r = rec.get(n, {})
        if "ms" not in r:
            cells.append("ERR")
            continue
        sp = f" {f / r['ms']:.2f}x" if f else ""
        cells.append(f"{r['ms']:.3f}{sp}{'' if r['ok'] else ' FAIL'}")
    fcell = f"{f:.3f}" if f else "-"
    return f"| {rec['shape']} | " + " | ".join(cells) + f" | {fcell} |"


def offline_regs(prep_only=False):
    """Compile the serial and output kernels of both structures for sm_90 on the CPU (Triton's bundled
    ptxas; no GPU) and print registers/thread, spill stack bytes/thread (cuobjdump STACK: ptxas puts
    spills there) and shared memory per program, for the points a search can pick."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("--offline-regs compiles kernels: unset TRITON_INTERPRET")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from aka.evaluate.static.compstats import res_usage

    mod = importlib.import_module("kernels.gdn_prefill.baseline")
    types = {"g_ptr": "*fp32", "beta_ptr": "*fp32", "h0_ptr": "*fp32", "ht_ptr": "*fp32", "mc_ptr": "*fp32",
             "cu_ptr": "*i32", "cus_ptr": "*i32", "cuc_ptr": "*i32", "scale": "fp32"}
    shape = dict(HV=32, HK=16, K=D, V=D, BT=64, LOG_N=2, HAS_H0=False)  # G1; regs do not depend on T

    def compile_one(fn, consts, warps, stages):
        sig = {a: "constexpr" if a in consts else types.get(a, "*bf16" if a.endswith("_ptr") else "i32")
               for a in fn.arg_names}
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": warps, "num_stages": stages})
        u = res_usage(k.asm["cubin"]).get(fn.__name__, {})
        cell = f"{u.get('REG', '?')} | {u.get('STACK', '?')} | {k.metadata.shared}"
        return cell + (f" | {len(k.asm['cubin']) / 1024:.0f}" if fn.__name__.startswith("_prep") else "")

    print(f"triton {triton.__version__}, sm_90, G1 heads (HK 16, HV 32), K = V = {D}")
    # prep kernels: cubin bytes too (instruction footprint: the H200 profile's top stall was no_instruction)
    print("| prep kernel | pre_p | warps | stages | regs | spill stack B | smem B | cubin KB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    pshape = {k: v for k, v in shape.items() if k in ("HV", "HK", "K", "BT", "LOG_N")}
    for pp in (True, False):
        for warps in (2, 4, 8):
            for stages in (3, 1):
                pts = [(f"_prep64_kernel {p}", mod._prep64_kernel, dict(pshape, PREC=p, PRE_P=pp, PDEC=pp))
                       for p in ("tf32x3", "tf32")]
                for name, fn, c in pts:
                    cell = compile_one(fn, c, warps, stages)
                    print(f"| {name} | {pp} | {warps} | {stages} | {cell} |", flush=True)
    if prep_only:
        return
    print("| kernel | BV | warps | stages | variant | regs | spill stack B | smem B |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for bv in (32, 64, 128):
        for warps in (4, 8):
            for stages in (1, 2):
                for rk in (True, False):
                    c = dict(shape, BV=bv, RELOAD_K=rk, PRE_P=True)
                    cell = compile_one(mod._fwd_kernel, c, warps, stages)
                    print(f"| _fwd_kernel (fused) | {bv} | {warps} | {stages} | reload_k={rk} | {cell} |", flush=True)
                cell = compile_one(mod._rec_kernel, dict(shape, BV=bv), warps, stages)
                print(f"| _rec_kernel (split) | {bv} | {warps} | {stages} | | {cell} |", flush=True)
            for pp in (True, False):
                c = {k: v for k, v in shape.items() if k != "HAS_H0"}
                cell = compile_one(mod._out_kernel, dict(c, BV=bv, PRE_P=pp), warps, 1)
                print(f"| _out_kernel (split) | {bv} | {warps} | - | pre_p={pp} | {cell} |", flush=True)


def _tf32(x):
    """fp32 -> tf32 (10-bit mantissa), round to nearest (ties away: cvt.rna.tf32.f32, what Triton's
    tf32x3 split uses; plain tf32 mma operands in registers may instead be truncated by the hardware,
    which doubles the unit roundoff)."""
    b = x.float().contiguous().view(torch.int32)
    return ((b + 0x1000) & ~0x1FFF).view(torch.float32)


def _emu_dot(a, b, prec):
    """fp32 16x16 dot as tl.dot(input_precision=prec) computes it on sm_90 (products exact in the
    tensor core, accumulation rounded to fp32 once here: a slight underestimate of the error)."""
    if prec == "ieee":
        return (a.double() @ b.double()).float()
    ah, bh = _tf32(a), _tf32(b)
    if prec == "tf32":
        return (ah.double() @ bh.double()).float()
    al, bl = _tf32(a - ah), _tf32(b - bh)  # tf32x3: hi*hi + hi*lo + lo*hi
    return (ah.double() @ bh.double() + ah.double() @ bl.double() + al.double() @ bh.double()).float()


def _emu_sub16(a, prec):
    """_solve_kernel's T: fp32 forward substitution on the 16x16 diagonal blocks, _emu_blk16's merges."""
    return _emu_blk16(a, prec, inv=_emu_fsub16)


def _emu_fsub16(a):
    """fp32 forward substitution T_i = e_i - sum_{j<i} A_ij T_j on one 16x16 block (_sub16x4's order)."""
    t = torch.eye(16)
    for i in range(1, 16):
        t[i] = t[i] - (a[i, :, None] * t).sum(0)
    return t


def _emu_blk16(a, prec, inv=None):
    """_prep_kernel's T = (I + A)^-1 (A fp32 [64,64] strictly lower) with its exact dot sequence."""
    eye = torch.eye(16)
    blk = [[a[16 * i:16 * i + 16, 16 * j:16 * j + 16] for j in range(4)] for i in range(4)]

    def inv16(d):
        d2 = _emu_dot(d, d, prec)
        d4 = _emu_dot(d2, d2, prec)
        d8 = _emu_dot(d4, d4, prec)
        t = _emu_dot(eye - d, eye + d2, prec)
        t = _emu_dot(t, eye + d4, prec)
        return _emu_dot(t, eye + d8, prec)

    t = [[torch.zeros(16, 16) for _ in range(4)] for _ in range(4)]
    for i in range(4):
        t[i][i] = (inv or inv16)(blk[i][i])
    for d in range(1, 4):  # T_ij = -T_ii sum_{j<=m<i} A_im T_mj, in the kernel's order
        for i in range(d, 4):
            j = i - d
            acc = _emu_dot(blk[i][j], t[j][j], prec)
            for m in range(j + 1, i):
                acc = acc + _emu_dot(blk[i][m], t[m][j], prec)
            t[i][j] = -_emu_dot(t[i][i], acc, prec)
    return torch.cat([torch.cat(r, 1) for r in t], 0)


def emulate_prep(chunks=24):
    """CPU: Tb error vs float64 of the prep algorithms with tf32 rounding emulated (the interpreter
    computes every dot in fp32 whatever input_precision says, so it cannot show tf32 error).

    Chunks of 64 keys: q/k/g/beta as in make_inputs (Qwen gates) or keys made correlated (corr: a
    shared direction mixed in, beta in [0.5, 1]: larger inverse, the case where rounding grows)."""
    print("| keys | algorithm | Tb fp32 rel err | Tb fp32 max abs err | Tb bf16 rel err | max abs Tb |")
    print("| --- | --- | --- | --- | --- | --- |")
    for corr in (0.0, 0.9, 0.99):
        rows = {}
        for c in range(chunks):
            inp = make_inputs(1, 1, [64], False, seed=1000 + c, dev=torch.device("cpu"))
            k, g, beta = inp["k"][:, 0].float(), inp["g"][:, 0].double(), inp["beta"][:, 0].double()
            if corr:
                u = torch.nn.functional.normalize(torch.randn(D, generator=torch.Generator().manual_seed(c)), dim=0)
                k = torch.nn.functional.normalize(corr * u + (1 - corr) * k, dim=-1).bfloat16().float()
                beta = 0.5 + 0.5 * beta
            gam = g.cumsum(0)
            a64 = torch.tril((k.double() @ k.double().T) * torch.exp(gam[:, None] - gam[None, :]) * beta[:, None], -1)
            eye = torch.eye(64, dtype=torch.float64)
            ref = torch.linalg.solve_triangular(eye + a64, eye, upper=False) * beta[None, :]
            a32 = a64.float()  # the kernels' A: bf16 K K^T accumulated in fp32, scaled in fp32
            for name, fn in (("blk16 tf32x3", lambda a: _emu_blk16(a, "tf32x3")),
                             ("blk16 tf32", lambda a: _emu_blk16(a, "tf32")),
                             ("blk16 ieee", lambda a: _emu_blk16(a, "ieee")),
                             ("sub16 ieee", lambda a: _emu_sub16(a, "ieee")),
                             ("sub16 tf32x3", lambda a: _emu_sub16(a, "tf32x3")),
                             ("sub16 tf32", lambda a: _emu_sub16(a, "tf32"))):
                tb = fn(a32) * beta.float()[None, :]
                r = rows.setdefault(name, [0.0, 0.0, 0.0, 0.0, 0.0])
                r[0] += (tb.double() - ref).norm().item() ** 2
                r[1] = max(r[1], (tb.double() - ref).abs().max().item())
                r[2] += (tb.bfloat16().double() - ref).norm().item() ** 2
                r[3] += ref.norm().item() ** 2
                r[4] = max(r[4], ref.abs().max().item())
        for name, r in rows.items():
            print(f"| corr {corr} | {name} | {math.sqrt(r[0] / r[3]):.2e} | {r[1]:.2e} | {math.sqrt(r[2] / r[3]):.2e} "
                  f"| {r[4]:.2f} |", flush=True)


def prep_only(mod, inp, cfg):
    """_index_kernel + the prep launches of cfg alone (baseline._prep, what forward() calls first);
    returns Tb so variants can be compared with each other."""
    q, k, g, beta, cu = inp["q"], inp["k"], inp["g"], inp["beta"], inp["cu_seqlens"]
    T, _, K = q.shape
    HV, N = g.shape[1], cu.numel() - 1
    dev = q.device
    idx = torch.empty(2, N + 1, dtype=torch.int32, device=dev)
    mod._index_kernel[(1,)](cu, idx[0], idx[1], N, 1 << 30, BT=64, BLOCK=max(16, 1 << max(0, (N - 1).bit_length())))
    nt_bound = -(-T // 64) + N
    tb = torch.empty(T, HV, 64, dtype=torch.bfloat16, device=dev)
    pbuf = torch.empty(T, HV, 64, dtype=torch.bfloat16, device=dev) if cfg["pre_p"] else tb
    mod._prep(q, k, g, beta, cu, idx[0], tb, pbuf, N, K**-0.5, max(1, int(N).bit_length()) + 1, nt_bound, cfg)
    return tb


def time_prep_only(mod, variants, args, dev):
    """--prep-only: time the prep kernel of every variant (with its _index_kernel launch) per shape,
    interleaved (time_all); ok = Tb within 5e-3 relative of the first variant's Tb (both bf16
    roundings of ~the same matrix)."""
    from aka.evaluate.host.bench import CudaTimer

    timer = CudaTimer(256 * 1024 * 1024)
    t_begin = time.time()
    print("| shape | " + " | ".join(variants) + " | (prep us, median; Tb rel diff vs first)", flush=True)
    for sid in args.shapes.split(","):
        if args.budget_s and time.time() - t_begin > args.budget_s:
            print(sid, "skipped: budget", flush=True)
            continue
        hk, hv, lens, h0 = SHAPES[sid]
        inputs = [make_inputs(hk, hv, lens, h0, seed=100 + r, dev=dev) for r in range(args.nrot)]
        cells, tb0, impls = {}, None, {}
        for name, cfg in variants.items():
            try:
                tb = prep_only(mod, inputs[0], cfg).double()
                torch.cuda.synchronize()
                tb0 = tb if tb0 is None else tb0
                d = ((tb - tb0).norm() / tb0.norm()).item()
                cells[name] = f"({d:.1e}{'' if d <= 5e-3 else ' FAIL'})"
                impls[name] = lambda cfg=cfg, **kw: prep_only(mod, kw, cfg)  # noqa: E731
            except Exception as exc:  # noqa: BLE001
                cells[name] = f"ERR {type(exc).__name__}: {str(exc)[:120]}"
        for name, tm in time_all(impls, inputs, args, timer).items():
            cells[name] = f"{tm.median_us:.1f} us " + cells[name]
        print(f"| {sid} | " + " | ".join(cells[n] for n in variants) + f" | [{time.time() - t_begin:.0f} s]",
              flush=True)


def fla_fn():
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    def run(q, k, v, g, beta, cu_seqlens, initial_state=None, cu64=None):
        # fla wants int64 cu_seqlens: made once per input set (a data_ptr-keyed cache here went stale)
        o, s = chunk_gated_delta_rule(
            q[None], k[None], v[None], g[None], beta[None], scale=D**-0.5, initial_state=initial_state,
            output_final_state=True, cu_seqlens=cu64,
        )
        return o[0], s

    return run


def time_all(impls, inputs_list, args, timer):
    """aka's own harness (aka.evaluate.host.bench.time_interleaved): every implementation is timed in alternating
    blocks of 5 calls on the same rotated inputs, each with an L2 flush + device sync before it, so
    clock or thermal drift cannot favour whichever ran first (sequential sections did: on 2026-11-29
    two code-identical variants at G7 read 1.086 vs 0.934 ms in one run)."""
    from aka.evaluate.host.bench import BenchConfig, time_interleaved

    cfg = BenchConfig(warmup=2, min_iters=min(args.reps, 10), max_iters=max(args.reps, 10), check_every=5,
                      time_cap_s=args.section_s, graph=False)
    calls = {n: [lambda fn=fn, inp=inp: fn(**inp) for inp in inputs_list] for n, fn in impls.items()}
    if not calls:
        return {}
    return time_interleaved(calls, cfg, dict.fromkeys(calls, timer))


def extra_mem(fn, inp, out_bytes):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    r = fn(**inp)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del r
    return max(0, peak - base - out_bytes)


def small_cases(mod, args, dev):
    cp = {"cp": True, "cp_min_programs": 10**9, "cp_target_programs": 10**9, "cp_min_seg_chunks": 1}
    cases = [([127, 1, 129, 64], 1, 2, True), ([300, 17, 129], 2, 4, True)]
    for lens, hk, hv, h0 in cases:
        inp = make_inputs(hk, hv, lens, h0, seed=1, dev=dev)
        o_ref, s_ref = ref64(**{n: x for n, x in inp.items() if n != "cu64"})
        for name in args.variants.split(","):
            for cpn, extra in (("nocp", {"cp": False}), ("cp", cp)):
                cfg = dict(mod.CONFIG, **VARIANTS[name], **extra)
                o, s = mod.forward(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], inp["cu_seqlens"],
                                   inp["initial_state"], None, cfg)
                torch.cuda.synchronize()
                print(lens, hk, hv, h0, name, cpn, f"o {rel(o, o_ref):.2e} S {rel(s, s_ref):.2e}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="default,bv64w8,prep_tf32,nocp,cp1024,no_pre_p")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--nrot", type=int, default=3)
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--small", action="store_true", help="small edge cases only (debug), CUDA_LAUNCH_BLOCKING")
    ap.add_argument("--set", default="", help="JSON CONFIG overrides applied to every variant")
    ap.add_argument("--section-s", type=float, default=2.0, help="wall cap of one shape x variant timing")
    ap.add_argument("--budget-s", type=float, default=0.0, help="skip the shapes left after this (0: no cap)")
    ap.add_argument("--ref-max-tokens", type=int, default=1 << 30, help="no float64 check above this T")
    ap.add_argument("--offline-regs", action="store_true", help="CPU: sm_90 regs/spills of both structures")
    ap.add_argument("--emulate-prep", action="store_true", help="CPU: Tb error of prep options, tf32 emulated")
    ap.add_argument("--prep-only", action="store_true", help="time only the prep kernel of each variant")
    args = ap.parse_args()
    if args.offline_regs:
        return offline_regs(args.prep_only)
    if args.emulate_prep:
        return emulate_prep()
    t_begin = time.time()
    out_dir = os.environ.get("OUT")
    dev = torch.device("cuda")
    mod = importlib.import_module("kernels.gdn_prefill.baseline")
    if args.small:
        return small_cases(mod, args, dev)
    base_cfg = dict(mod.CONFIG, **json.loads(args.set or "{}"))
    variants = {n: dict(base_cfg, **VARIANTS[n]) for n in args.variants.split(",")}
    if args.prep_only:
        return time_prep_only(mod, variants, args, dev)
    fla = None
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    import triton

    info["triton"] = triton.__version__
    try:
        import subprocess

        info["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        info["driver"] = f"? ({exc})"
    if not args.no_fla:
        import fla

        info["fla"] = getattr(fla, "__version__", "?")
        try:
            import flash_qla  # noqa: F401

            info["fla_path"] = f"flash_qla importable (FLA_FLASH_QLA={os.environ.get('FLA_FLASH_QLA')})"
        except ImportError:
            info["fla_path"] = f"triton (flash_qla not installed, FLA_FLASH_QLA={os.environ.get('FLA_FLASH_QLA')})"
        fla = fla_fn()
    print(json.dumps(info), flush=True)
    from aka.evaluate.host.bench import CudaTimer

    timer = CudaTimer(256 * 1024 * 1024)  # > 4x the H200's 60 MB L2
    log = []
    names = list(variants)
    print("| shape | " + " | ".join(names) + " | fla | (ms; speedup vs fla; ok = fp64 check passed)", flush=True)
    for sid in args.shapes.split(","):
        if args.budget_s and time.time() - t_begin > args.budget_s:
            print(sid, f"skipped: --budget-s {args.budget_s:.0f} s spent", flush=True)
            continue
        hk, hv, lens, h0 = SHAPES[sid]
        T, N = sum(lens), len(lens)
        t0 = time.time()
        inputs = [make_inputs(hk, hv, lens, h0, seed=100 + r, dev=dev) for r in range(args.nrot)]
        if T <= args.ref_max_tokens:
            o_ref, s_ref = ref64(**{n: x for n, x in inputs[0].items() if n != "cu64"})
        else:  # errors read as nan: not checked
            o_ref = s_ref = None
        out_bytes = T * hv * D * 2 + N * hv * D * D * 4
        rec = {"shape": sid, "ref_s": round(time.time() - t0, 1)}
        impls = {}  # name -> fn(**inputs); checked first, then all timed together, interleaved
        if fla is not None:
            impls["fla"] = fla
        for name, cfg in variants.items():
            impls[name] = lambda cfg=cfg, **kw: mod.forward(  # noqa: E731
                kw["q"], kw["k"], kw["v"], kw["g"], kw["beta"], kw["cu_seqlens"], kw.get("initial_state"), None, cfg
            )
        for name, fn in list(impls.items()):
            try:
                o, s = fn(**inputs[0])
                torch.cuda.synchronize()
                eo, es = rel(o, o_ref), rel(s, s_ref)
                finite = bool(torch.isfinite(o.float()).all() and torch.isfinite(s).all())
                ok = finite and (o_ref is None or (eo <= 1e-2 and es <= 5e-3))
                rec[name] = dict(eo=eo, es=es, ok=ok, mem=extra_mem(fn, inputs[0], out_bytes))
                del o, s
            except Exception as exc:  # noqa: BLE001
                rec[name] = dict(error=f"{type(exc).__name__}: {str(exc)[:300]}")
                del impls[name]
                print(sid, name, rec[name], flush=True)
        timings = time_all(impls, inputs, args, timer)
        for name, tm in timings.items():
            rec[name].update(ms=tm.median_us / 1e3, min=min(tm.samples_us) / 1e3, q1=tm.q1_us / 1e3,
                             q3=tm.q3_us / 1e3, n=tm.n)
            print(sid, name, {k: v for k, v in rec[name].items()}, flush=True)
        log.append(rec)
        print(row_line(rec, names), f"[{time.time() - t0:.1f} s, total {time.time() - t_begin:.0f} s]", flush=True)
        if out_dir:
            with open(os.path.join(out_dir, "gdn_prefill_log.json"), "w") as fh:
                json.dump({"info": info, "log": log}, fh, indent=1)
        del inputs, o_ref, s_ref
        torch.cuda.empty_cache()

    # variant summary (geomean speedup vs fla) then the main per-shape table for "default" (first variant)
    lines = []
    if fla is not None:
        lines.append("| variant | geomean speedup vs fla | all ok |")
        lines.append("| --- | --- | --- |")
        for n in names:
            sp = [r["fla"]["ms"] / r[n]["ms"] for r in log if "ms" in r.get(n, {})]
            ok = all(r.get(n, {}).get("ok", False) for r in log)
            gm = math.exp(sum(map(math.log, sp)) / len(sp)) if sp else float("nan")
            lines.append(f"| {n} | {gm:.2f}x ({len(sp)} shapes) | {ok} |")
        lines.append("")
        lines.append("| shape | " + " | ".join(names) + " | fla |")
        lines.append("| --- |" + " --- |" * (len(names) + 1))
        for r in log:
            cells = [f"{r[n]['ms']:.3f}" if "ms" in r.get(n, {}) else "ERR" for n in names]
            lines.append(f"| {r['shape']} | " + " | ".join(cells) + f" | {r['fla']['ms']:.3f} |")
        lines.append("")
    main = names[0]
    lines.append(f"Per shape, ours = variant '{main}'; ms = median; QLA/FI/FLA(pub) = published H200 (CUDA graphs)")
    lines.append("| shape | ours ms | fla ms | speedup | ours o err | ours S err | fla o err | fla S err "
                 "| ours extra MB | fla extra MB | QLA | FI | FLA(pub) |")
    lines.append("| --- |" + " --- |" * 12)
    for r in log:
        a = r.get(main, {})
        f = r.get("fla", {})
        pub = PUBLISHED[r["shape"]]
        if "ms" not in a:
            lines.append(f"| {r['shape']} | ERR {a.get('error', '')[:60]} |")
            continue
        sp = f"{f['ms'] / a['ms']:.2f}x" if f else "-"
        fcell = (f"{f['ms']:.3f}", sp, f"{f['eo']:.1e}", f"{f['es']:.1e}", f"{f['mem'] / 1e6:.0f}") if f else ("-",) * 5
        lines.append(
            f"| {r['shape']} | {a['ms']:.3f} | {fcell[0]} | {fcell[1]} | {a['eo']:.1e} | {a['es']:.1e} | {fcell[2]} "
            f"| {fcell[3]} | {a['mem'] / 1e6:.0f} | {fcell[4]} | {pub[0]} | {pub[1]} | {pub[2]} |"
        )
    table = "\n".join(lines)
    if out_dir:
        with open(os.path.join(out_dir, "gdn_prefill_table.md"), "w") as fh:
            fh.write(json.dumps(info) + "\n\n" + table + "\n")
        with open(os.path.join(out_dir, "gdn_prefill_log.json"), "w") as fh:
            json.dump({"info": info, "log": log}, fh, indent=1)
    print(json.dumps(info))
    print(table)


if __name__ == "__main__":
    main()
