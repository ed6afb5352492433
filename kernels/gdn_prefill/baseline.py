"""Gated DeltaNet chunked prefill (fla layout, packed varlen) in Triton, with context parallelism.

Recurrence per value head h (state S in R^{K x V}, fla layout), token t:
    S <- exp(g_t) S;  v~ = beta_t (v_t - S^T k_t);  S <- S + k_t v~^T;  o_t = S^T (scale q_t)

Chunked form, chunk C = 64, gamma = chunk-local cumsum of g kept in log2 units (exp2 everywhere):
    A  = strictly_lower(diag(beta) (K K^T . Gamma)),  T = (I + A)^-1,  Tb = T diag(beta)
    V~ = Tb (V - diag(e^gamma) K S)                   (FlashQLA's order: W = Tb diag(e^gamma) K never formed)
    O  = scale (diag(e^gamma) Q S + (Q K^T . Gamma . causal) V~)
    S' = e^{gamma_C} S + (diag(e^{gamma_C - gamma}) K)^T V~

Kernels (3 launches without CP, 5 with CP; no host-device sync):
  _index_kernel  one program: per-sequence prefix sums of chunk and segment counts (device side,
                 so no .tolist() on cu_seqlens).
  _prep64_kernel grid (HV, chunks): Tb = T diag(beta) as bf16 [T, HV, 64] (1/4 of what fla stores for
                 w+u) and P = scale Q K^T . Gamma with its column scales f, every product a tensor-core
                 dot: K K^T and Q K^T, the four diagonal 16x16 inverses as one batched series, two
                 64x64 doubling steps to the full inverse.
  _seg_kernel    (CP only) grid ((K+V)/BVA, HV, segments): for every segment but the last of its
                 sequence, runs the chunk recurrence from [I | 0] (first segment: [- | h0]) giving
                 the segment's affine transition S_out = M S_in + C (M: K x K, C: K x V, fp32).
  _chain_kernel  (CP only) grid (V/BVC, HV, N): S_in of segment j+1 = M_j S_in_j + C_j, a short
                 serial chain of 128x128 GEMMs per sequence (written over the C slots).
  _fwd_kernel    grid (V/BV, HV, segments): V~, outputs and state update, chunk by chunk from the
                 segment's entering state; writes o and the final state. V~, the per-chunk states and
                 the gates' products never leave registers.

Measured slower and removed (docs/perf/gdn_prefill.md, "Variants measured slower", numbers and
dates): preps with 16x16 blocks in registers (substitution or series), A through memory, a 63-step
substitution, ten 64x64x64 dots, P in its own kernel; the "w" chunk order (W per chunk); loading the
next chunk's tiles ahead; x split into two bf16 parts; the gates on bf16 operands (errors above
fla's); V~ rounded twice; the split structures (recurrence, then outputs in parallel: 0.44-0.53x).

Context parallelism: a sequence is cut into segments of SEG chunks; the policy (_seg_chunks) only
uses host-known numbers (T_total, N, HV) so the launch needs no sync.  It costs the M/C pass
(~2x the state GEMMs of the covered chunks) but turns a 128-step serial chain (G1) into
independent segments.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

# Values the entry point uses; a search replaces this dict wholesale (read at call time). A key is a
# choice the GPU showed winning somewhere or a launch parameter worth searching; the structures that
# lost everywhere they were measured are gone (docs/perf/gdn_prefill.md, "Variants measured slower").
CONFIG = {
    # value-column block of the serial kernels (state block K x BV in registers): 32 crashes on the H200
    # (Triton 3.6, illegal memory access); 128 ran slower (G1 631 vs 416 us, 2026-12-01)
    "BV": 64,
    # 4 warps (loop stages 2): 255 regs + 144 B spill (ptxas sm_90, Triton 3.6), so two programs share
    # an SM and hide each other's latency: with the pipelined loop the serial kernel went from 404 to
    # 145 us at G1 (H200); 8 warps 0.62-0.82x geomean
    "fwd_warps": 4,
    "fwd_loop_stages": 2,  # Triton's pipeliner on the serial loop (1: 0.89-0.91x geomean; 3: slower)
    "BVA": 64,  # column block of _seg_kernel (over the K+V columns of [M | C])
    "seg_warps": 4,
    "seg_loop_stages": 3,
    "BVC": 32,  # column block of the chain kernel
    # the prep's series and doubling dots: tf32 since 2026-11-29 (+6.8% end to end); tf32x3 is the
    # precise fallback (>= 10% slower, H200 paired screens 2026-12-04)
    "prep_prec": "tf32",
    "cp": True,  # context parallelism on/off
    # use CP only when N*HV*(V/BV) is below this (one program per SM): at 264, G5 (4 x 2048, 256 programs)
    # ran 10% slower with CP than without on the H200 (0.973 vs 1.071 ms)
    "cp_min_programs": 132,
    "cp_target_programs": 512,  # pick SEG so that chunks*HV*(V/BV)/SEG ~ this
    "cp_min_seg_chunks": 8,  # never cut segments shorter than this
    # Warm-up (FlashQLA's idea): a segment whose last n <= cp_warm_chunks chunks decay by
    # exp(sum g) <= exp(cp_warm_log_decay) gets its exit state from those n chunks alone (no M, no
    # chain GEMM); the rest take the exact [M | C] path. 0 turns it off. 32 since 2026-12-01: more
    # weak-gate heads qualify on long segments (H200, graph, one run against 16: G4 1486 -> 1417 us,
    # transition pass 222 -> 195; the other shapes within 1%)
    "cp_warm_chunks": 32,
    # -14 (e^-14 ~ 8e-7 of |S_in|, far under the contract's 5e-3) since 2026-12-05: aka optimize promoted
    # it over -18 on 2026-12-03 (run 20261203-193128-45144b, ABBA +2.08% under graph replay, gated
    # smoke+edge twice and full)
    "cp_warm_log_decay": -14.0,
}

SPACE = {
    "BV": [64],
    "fwd_warps": [4],  # 8: 0.62-0.82x geomean (H200, 2026-12-01), >= 10% slower in the 2026-12-04 screens
    "fwd_loop_stages": [2],  # 1: 0.89-0.91x geomean (H200, 2026-12-01/02); 3: slower
    "BVA": [32, 64, 128],
    "seg_warps": [4, 8],
    "seg_loop_stages": [1, 2, 3],
    "BVC": [32, 64],
    # tf32x3, the precise fallback, >= 10% slower (H200 paired screens, 2026-12-04); ieee (fp32 FMA): 8x slower prep
    "prep_prec": ["tf32"],
    "cp": [True, False],
    "cp_min_programs": [132, 264, 528, 1056],
    "cp_target_programs": [264, 512, 1024, 2048],
    "cp_min_seg_chunks": [4, 8, 16, 32],
    "cp_warm_chunks": [0, 8, 16, 32],
    "cp_warm_log_decay": [-18.0, -14.0],  # stricter than e^-14 ~ 8e-7 only: the bound multiplies |S_in|
}

BT = 64  # chunk size: fixed, the inverse is written for 4 blocks of 16
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)  # gates in log2 units: exp(x) = exp2(x * LOG2E)


# ----------------------------------------------------------------------------------------------
# helpers


@triton.jit
def _locate(cu_ptr, idx, N, LOG_N: tl.constexpr):
    """Largest s in [0, N] with cu[s] <= idx (cu non-decreasing, cu[0] = 0); N when idx >= cu[N]."""
    lo = idx * 0
    hi = lo + N
    for _ in tl.static_range(LOG_N):
        mid = (lo + hi + 1) // 2
        val = tl.load(cu_ptr + mid)
        ok = val <= idx
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid - 1)
    return lo


@triton.jit
def _index_kernel(cu_ptr, cuc_ptr, cus_ptr, N, SEG, BT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < N
    b = tl.load(cu_ptr + i, mask=m, other=0)
    e = tl.load(cu_ptr + i + 1, mask=m, other=0)
    nch = (e - b + BT - 1) // BT
    # at least one segment per sequence so an empty sequence still writes its final state
    nseg = tl.where(m, tl.maximum((nch + SEG - 1) // SEG, 1), 0)
    tl.store(cuc_ptr + 1 + i, tl.cumsum(nch, 0), mask=m)
    tl.store(cus_ptr + 1 + i, tl.cumsum(nseg, 0), mask=m)
    z = tl.zeros([BLOCK], dtype=tl.int32)
    tl.store(cuc_ptr + i, z, mask=i == 0)
    tl.store(cus_ptr + i, z, mask=i == 0)


@triton.jit
def _chunk_t0(cu_ptr, cuc_ptr, seq, i_c, BT: tl.constexpr):
    """First token of chunk i_c (a global chunk index, inside sequence seq) and its sequence's end."""
    bos = tl.load(cu_ptr + seq).to(tl.int64)
    eos = tl.load(cu_ptr + seq + 1).to(tl.int64)
    c0 = tl.load(cuc_ptr + seq)
    return bos + (i_c - c0).to(tl.int64) * BT, eos


# ----------------------------------------------------------------------------------------------
# kernel 1: Tb = (I + A)^-1 diag(beta) per chunk and value head


@triton.jit
def _prep64_kernel(
    q_ptr, k_ptr, g_ptr, beta_ptr, cu_ptr, cuc_ptr, tb_ptr, p_ptr, f_ptr, N, scale,
    HV: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, LOG_N: tl.constexpr,
    PREC: tl.constexpr,
):
    """Tb [T, HV, BT], P [T, HV, BT] and f [T, HV] of one chunk and value head (q, k [T, HK, K] bf16;
    g, beta [T, HV] fp32), every product a tensor-core dot.

    K K^T and Q K^T [BT, BT]; P first (Q K^T is then dead), then A. A's four diagonal 16x16 blocks
    are taken out as [4, 16, 16] (a block's rows sit in one warp of the dot's layout at 4 warps) and
    inverted together by the series (I - D)(I + D^2)(I + D^4)(I + D^8) (D^16 = 0) as batched dots;
    the block-diagonal result is doubled to the full inverse by two steps of [BT, BT] dots,
    T <- T - T (L T), L the blocks of A just below T's diagonal blocks (16 -> 32, then 32 -> 64):
    T L T holds T_2 A_21 T_1 where the larger inverse has -T_2 A_21 T_1. Addresses: one 64-bit base
    per tile plus int32 offsets (64-bit offset tensors cost ~90 registers here: ptxas sm_90, Triton 3.6)."""
    i_h = tl.program_id(0)
    i_c = tl.program_id(1)
    seq = _locate(cuc_ptr, i_c, N, LOG_N)
    if seq >= N:
        return
    t0, eos = _chunk_t0(cu_ptr, cuc_ptr, seq, i_c, BT)
    i_hk = i_h // (HV // HK)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    o_4 = tl.arange(0, 4)
    o_16 = tl.arange(0, 16)
    m_t = o_t < eos - t0
    o_qk = o_t[:, None] * (HK * K) + o_k[None, :]
    b_k = tl.load(k_ptr + (t0 * HK + i_hk) * K + o_qk, mask=m_t[:, None], other=0.0)
    b_kk = tl.dot(b_k, tl.trans(b_k))
    b_q = tl.load(q_ptr + (t0 * HK + i_hk) * K + o_qk, mask=m_t[:, None], other=0.0)
    b_qk = tl.dot(b_q, tl.trans(b_k))
    b_g = tl.load(g_ptr + (t0 * HV + i_h) + o_t * HV, mask=m_t, other=0.0)
    b_beta = tl.load(beta_ptr + (t0 * HV + i_h) + o_t * HV, mask=m_t, other=0.0)
    b_gam = tl.cumsum(b_g, 0) * LOG2E
    b_gl = tl.sum(b_g, 0) * LOG2E
    p_p = p_ptr + (t0 * HV + i_h) * BT  # this chunk's first row; o_tt: [BT, BT] int32 offsets from it
    p_tb = tb_ptr + (t0 * HV + i_h) * BT
    o_tt = o_t[:, None] * (HV * BT) + o_t[None, :]
    # P = scale (Q K^T . Gamma . causal), column j scaled by 2^-f_j, f_j = frac(gl - gam_j) stored beside
    # it: the forward kernel's one V~ 2^f tile then serves both P V~ and the state update (_fwd_kernel)
    b_dl = b_gl - b_gam
    b_n = tl.floor(b_dl)
    tl.store(f_ptr + (t0 * HV + i_h) + o_t * HV, b_dl - b_n, mask=m_t)
    b_lg = (b_gam - b_gl)[:, None] + b_n[None, :]
    b_lg = tl.where(o_t[:, None] >= o_t[None, :], b_lg, float("-inf"))
    tl.store(p_p + o_tt, (b_qk * tl.exp2(b_lg) * scale).to(tl.bfloat16), mask=m_t[:, None])
    # A = strictly_lower(diag(beta) (K K^T . Gamma)); the exponent is <= 0 below the diagonal
    b_lg = tl.where(o_t[:, None] > o_t[None, :], b_gam[:, None] - b_gam[None, :], float("-inf"))
    b_a = b_kk * tl.exp2(b_lg) * b_beta[:, None]
    m_diag4 = (o_4[:, None] == o_4[None, :])[:, None, :, None]
    b_d = tl.sum(tl.where(m_diag4, tl.reshape(b_a, [4, 16, 4, 16]), 0.0), 2)
    b_i = tl.where((o_16[:, None] == o_16[None, :])[None, :, :], 1.0, 0.0)
    b_d2 = tl.dot(b_d, b_d, input_precision=PREC)
    b_d4 = tl.dot(b_d2, b_d2, input_precision=PREC)
    b_d8 = tl.dot(b_d4, b_d4, input_precision=PREC)
    b_t4 = tl.dot(b_i - b_d, b_i + b_d2, input_precision=PREC)
    b_t4 = tl.dot(b_t4, b_i + b_d4, input_precision=PREC)
    b_t4 = tl.dot(b_t4, b_i + b_d8, input_precision=PREC)
    b_t = tl.reshape(tl.where(m_diag4, b_t4[:, :, None, :], 0.0), [BT, BT])
    i_row = o_t[:, None] // 16
    i_col = o_t[None, :] // 16
    b_l = tl.where((i_row == i_col + 1) & (i_row % 2 == 1), b_a, 0.0)
    b_t = b_t - tl.dot(b_t, tl.dot(b_l, b_t, input_precision=PREC), input_precision=PREC)
    b_l = tl.where((i_row >= 2) & (i_col < 2), b_a, 0.0)
    b_t = b_t - tl.dot(b_t, tl.dot(b_l, b_t, input_precision=PREC), input_precision=PREC)
    tl.store(p_tb + o_tt, (b_t * b_beta[None, :]).to(tl.bfloat16), mask=m_t[:, None])


# ----------------------------------------------------------------------------------------------
# per-chunk building blocks shared by the segment and forward kernels


@triton.jit
def _seg_bounds(cu_ptr, cus_ptr, seq, i_s, SEG, BT: tl.constexpr):
    """Segment i_s of sequence seq: (its index j in the sequence, the sequence's segment count, first
    token, length, and the segment's local token range [t_beg, t_end))."""
    s0 = tl.load(cus_ptr + seq)
    nseg = tl.load(cus_ptr + seq + 1) - s0
    j = i_s - s0
    bos = tl.load(cu_ptr + seq).to(tl.int64)
    L = tl.load(cu_ptr + seq + 1) - tl.load(cu_ptr + seq)
    t_beg = j * SEG * BT
    return j, nseg, bos, L, t_beg, tl.minimum(t_beg + SEG * BT, L)


@triton.jit
def _ld(base, rows, m_rows, STRIDE: tl.constexpr, cols):
    return tl.load(base + (rows[:, None] * STRIDE + cols[None, :]), mask=m_rows[:, None], other=0.0)


@triton.jit
def _carry(b_h, b_kd, b_vd, b_gl):
    """The chunk's state step once its operands are formed: the carried state decays by the chunk's
    total gate, the chunk adds K^T V~ (the decay of each token folded into kd and vd by the caller).
    Both serial kernels step the state here."""
    return b_h * tl.exp2(b_gl) + tl.dot(tl.trans(b_kd), b_vd)


@triton.jit
def _state_update_f32(b_h, b_k, b_vn, b_gam, b_gl):
    """The state step from the fp32 V~ with one bf16 rounding instead of two: the decay 2^d (d = gl -
    gam <= 0, log2 units) splits into 2^floor(d), which scales k exactly (a power of two; bf16 has
    fp32's exponent range), and 2^frac(d), which scales V~ before its one rounding. Scaling k itself
    keeps the dot's operand a fresh register tile: the plain k tile as the transposed operand made the
    forward kernel 39% slower on the H200 (shared memory 57.6 -> 74 KB, ptxas sm_90)."""
    b_d = b_gl - b_gam
    b_vd = (b_vn * tl.exp2(b_d - tl.floor(b_d))[:, None]).to(tl.bfloat16)
    b_kd = (b_k * tl.exp2(tl.floor(b_d))[:, None]).to(tl.bfloat16)
    return _carry(b_h, b_kd, b_vd, b_gl)


@triton.jit
def _qs_f32(b_q, b_hb, b_gam, scale):
    """scale diag(e^gamma) Q S with e^gamma as 2^floor (exact on the bf16 q) times 2^frac (on fp32 Q S)."""
    b_gq = tl.floor(b_gam)
    return tl.dot((b_q * tl.exp2(b_gq)[:, None]).to(tl.bfloat16), b_hb) * (tl.exp2(b_gam - b_gq) * scale)[:, None]


# ----------------------------------------------------------------------------------------------
# kernel 2 (CP): affine transition [M | C] of every segment except the last of its sequence


@triton.jit
def _seg_kernel(
    k_ptr, v_ptr, g_ptr, tb_ptr, h0_ptr, mc_ptr, warm_ptr, cu_ptr, cus_ptr, N, SEG, THR,
    HV: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
    BVA: tl.constexpr, LOG_N: tl.constexpr, HAS_H0: tl.constexpr, WARM: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
):
    """[M | C] of segment j: S_out = M S_in + C over the segment's chunks. k [T, HK, K] bf16; v [T, HV, V]
    bf16; g [T, HV] fp32; Tb [T, HV, BT] bf16; h0 [N, HV, K, V] fp32; -> [M | C] [segments, HV, K, K + V]
    fp32 and the warm-up flags [segments, HV] int32.

    The chunk step in _fwd_kernel's order (V~ = Tb (V - e^gamma K S), no W), LOOP_STAGES its software
    pipelining, as there; the state update with one rounding (_state_update_f32).

    Warm-up (WARM > 0): when the gates of the segment's last n <= WARM chunks decay by
    exp(sum g) <= exp(THR), C is run over those n chunks from a zero state and M is dropped
    (warm_ptr[j, h] = 1; the chain then copies C). Every per-token transition
    e^g (I - beta k k^T) has spectral norm <= e^g when 0 <= beta |k|^2 <= 2 (the contract: beta in
    (0, 1), k L2-normalised), so the dropped term M S_in is bounded by e^THR |S_in|. Otherwise the
    exact path: the whole segment, M from the identity. Decided per (segment, head) on the device."""
    i_c = tl.program_id(0)
    i_h = tl.program_id(1)
    i_s = tl.program_id(2)
    seq = _locate(cus_ptr, i_s, N, LOG_N)
    if seq >= N:
        return
    s0 = tl.load(cus_ptr + seq)
    nseg = tl.load(cus_ptr + seq + 1) - s0
    j = i_s - s0
    NKB: tl.constexpr = K // BVA
    is_c = i_c >= NKB
    if j == nseg - 1:
        return  # the last segment's transition is never needed
    if (j == 0) & (i_c < NKB):
        return  # the first segment starts from a known state: no M needed
    bos = tl.load(cu_ptr + seq).to(tl.int64)
    L = tl.load(cu_ptr + seq + 1) - tl.load(cu_ptr + seq)
    t_beg = j * SEG * BT
    t_end = tl.minimum(t_beg + SEG * BT, L)  # a segment other than the last is SEG full chunks
    i_hk = i_h // (HV // HK)
    p_k = k_ptr + (bos * HK + i_hk) * K
    p_v = v_ptr + (bos * HV + i_h) * V
    p_g = g_ptr + bos * HV + i_h
    p_tb = tb_ptr + (bos * HV + i_h) * BT
    warm = j < 0  # False, as a tensor
    if WARM > 0:
        # decay of the segment's last 1..WARM chunks: one [WARM, BT] load, newest chunk first
        o_w = tl.arange(0, WARM)
        o_tok = t_end - (o_w[:, None] + 1) * BT + tl.arange(0, BT)[None, :]
        inside = o_w < SEG
        b_tot = tl.sum(tl.load(p_g + o_tok * HV, mask=inside[:, None], other=0.0), 1)
        ok = (tl.cumsum(b_tot, 0) <= THR) & inside
        n_warm = tl.min(tl.where(ok, o_w + 1, WARM + 1), 0)
        warm = n_warm <= WARM
        if is_c & (i_c == NKB):
            tl.store(warm_ptr + i_s * HV + i_h, warm.to(tl.int32))
        if warm & (i_c < NKB):
            return  # M is dropped: its bound is e^THR
        if warm:
            t_beg = t_end - n_warm * BT
    o_k = tl.arange(0, K)
    o_c = i_c * BVA + tl.arange(0, BVA)  # column of [M | C]
    o_v = o_c - K  # value column (C part)
    b_h = (o_k[:, None] == o_c[None, :]).to(tl.float32)  # M part starts from I
    if is_c:
        b_h = tl.zeros([K, BVA], dtype=tl.float32)
        if HAS_H0:
            if (j == 0) & (warm == 0):  # a warm-up from inside the segment has forgotten h0 (same bound)
                b_h = tl.load(h0_ptr + ((seq * HV + i_h) * K + o_k[:, None]).to(tl.int64) * V + o_v[None, :])
    for tt in tl.range(t_beg, t_end, BT, num_stages=LOOP_STAGES):
        o_r = tt + tl.arange(0, BT)
        m_r = o_r < L
        b_k = _ld(p_k, o_r, m_r, HK * K, o_k)
        b_g = tl.load(p_g + o_r * HV, mask=m_r, other=0.0)
        b_gam = tl.cumsum(b_g, 0) * LOG2E
        b_gl = tl.sum(b_g, 0) * LOG2E
        b_tb = _ld(p_tb, o_r, m_r, HV * BT, tl.arange(0, BT))
        b_x = -tl.dot(b_k, b_h.to(tl.bfloat16)) * tl.exp2(b_gam)[:, None]
        if is_c:
            b_x += _ld(p_v, o_r, m_r, HV * V, o_v).to(tl.float32)
        b_h = _state_update_f32(b_h, b_k, tl.dot(b_tb, b_x.to(tl.bfloat16)), b_gam, b_gl)
    p_mc = mc_ptr + ((i_s * HV + i_h) * K + o_k[:, None]).to(tl.int64) * (K + V) + o_c[None, :]
    tl.store(p_mc, b_h)


# ----------------------------------------------------------------------------------------------
# kernel 3 (CP): entering states S_in(j+1) = M_j S_in(j) + C_j, written over C_j


@triton.jit
def _chain_kernel(
    mc_ptr, warm_ptr, cus_ptr, N, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BVC: tl.constexpr,
    BKC: tl.constexpr, PREC: tl.constexpr, WARM: tl.constexpr,
):
    """[M | C] [segments, HV, K, K + V] fp32 in place: the C part of segment j becomes the state entering
    segment j + 1 (M_j S_in(j) + C_j, or C_j as it is where the warm-up flag [segments, HV] is set)."""
    i_v = tl.program_id(0)
    i_h = tl.program_id(1)
    seq = tl.program_id(2)
    s0 = tl.load(cus_ptr + seq)
    nseg = tl.load(cus_ptr + seq + 1) - s0
    o_k = tl.arange(0, K)
    o_v = K + i_v * BVC + tl.arange(0, BVC)
    o_kk = tl.arange(0, BKC)
    for j in range(1, nseg - 1):
        exact = True
        if WARM > 0:
            exact = tl.load(warm_ptr + (s0 + j) * HV + i_h) == 0
        if exact:  # a warmed-up segment's C is already its exit state
            base = mc_ptr + ((s0 + j) * HV + i_h).to(tl.int64) * K * (K + V)
            prev = mc_ptr + ((s0 + j - 1) * HV + i_h).to(tl.int64) * K * (K + V)
            b_acc = tl.load(base + o_k[:, None] * (K + V) + o_v[None, :])
            for k0 in tl.static_range(0, K, BKC):
                b_m = tl.load(base + o_k[:, None] * (K + V) + (k0 + o_kk)[None, :])
                b_s = tl.load(prev + (k0 + o_kk)[:, None] * (K + V) + o_v[None, :])
                b_acc += tl.dot(b_m, b_s, input_precision=PREC)
            tl.store(base + o_k[:, None] * (K + V) + o_v[None, :], b_acc)


# ----------------------------------------------------------------------------------------------
# kernel 4: fused chunk recurrence + output for one segment, one value head, BV value columns


@triton.jit
def _fwd_loads(p_k, p_g, p_tb, p_q, p_v, p_p, tt, L, o_v, HV: tl.constexpr, HK: tl.constexpr, K: tl.constexpr,
              V: tl.constexpr, BT: tl.constexpr):
    """Every tile one chunk of _fwd_kernel reads; rows at or past L read as zeros."""
    o_r = tt + tl.arange(0, BT)
    m_r = o_r < L
    o_k = tl.arange(0, K)
    o_t = tl.arange(0, BT)
    b_k = _ld(p_k, o_r, m_r, HK * K, o_k)
    b_g = tl.load(p_g + o_r * HV, mask=m_r, other=0.0)
    b_tb = _ld(p_tb, o_r, m_r, HV * BT, o_t)
    b_q = _ld(p_q, o_r, m_r, HK * K, o_k)
    b_v = _ld(p_v, o_r, m_r, HV * V, o_v)
    b_p = _ld(p_p, o_r, m_r, HV * BT, o_t)
    return b_k, b_g, b_tb, b_q, b_v, b_p


@triton.jit
def _fwd_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, tb_ptr, p_ptr, f_ptr, o_ptr, h0_ptr, ht_ptr, mc_ptr, cu_ptr, cus_ptr, N, SEG,
    scale, HV: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
    BV: tl.constexpr, LOG_N: tl.constexpr, HAS_H0: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    """o [T, HV, V] bf16 and the final state [N, HV, K, V] fp32 from q, k [T, HK, K] bf16, v [T, HV, V] bf16,
    g [T, HV] fp32, Tb and P [T, HV, BT] bf16, f [T, HV] fp32 and the entering states (h0 [N, HV, K, V],
    or the C slots of [M | C] [segments, HV, K, K + V]).

    The chunk recurrence with its outputs, in FlashQLA's order: V~ = Tb (V - diag(e^gamma) K S), so
    the chunk's W = Tb diag(e^gamma) K (64x64x128, once per value block) is never formed and one k tile
    serves both K S and the update. P (scaled by 2^-f per column) and f come from the prep. The gates
    multiply fp32 products (Q S, and V~ in the state update) instead of bf16 operands (Q, K) before
    the dots, which removes two bf16 roundings per chunk; FlashQLA's fused kernel does the same."""
    i_v = tl.program_id(0)
    i_h = tl.program_id(1)
    i_s = tl.program_id(2)
    seq = _locate(cus_ptr, i_s, N, LOG_N)
    if seq >= N:
        return
    j, nseg, bos, L, t_beg, t_end = _seg_bounds(cu_ptr, cus_ptr, seq, i_s, SEG, BT)
    i_hk = i_h // (HV // HK)  # the q/k head value head i_h reads
    p_q = q_ptr + (bos * HK + i_hk) * K
    p_k = k_ptr + (bos * HK + i_hk) * K
    p_v = v_ptr + (bos * HV + i_h) * V
    p_o = o_ptr + (bos * HV + i_h) * V
    p_g = g_ptr + bos * HV + i_h
    p_tb = tb_ptr + (bos * HV + i_h) * BT
    p_p = p_ptr + (bos * HV + i_h) * BT
    o_k = tl.arange(0, K)
    o_v = i_v * BV + tl.arange(0, BV)
    if j == 0:
        b_h = tl.zeros([K, BV], dtype=tl.float32)
        if HAS_H0:
            b_h = tl.load(h0_ptr + ((seq * HV + i_h) * K + o_k[:, None]).to(tl.int64) * V + o_v[None, :])
    else:
        p_mc = mc_ptr + ((i_s - 1) * HV + i_h).to(tl.int64) * K * (K + V)
        b_h = tl.load(p_mc + o_k[:, None] * (K + V) + K + o_v[None, :])
    for tt in tl.range(t_beg, t_end, BT, num_stages=LOOP_STAGES):
        b_k, b_g, b_tb, b_q, b_v, b_p = _fwd_loads(p_k, p_g, p_tb, p_q, p_v, p_p, tt, L, o_v, HV, HK, K, V, BT)
        o_r = tt + tl.arange(0, BT)
        m_r = o_r < L
        b_gam = tl.cumsum(b_g, 0) * LOG2E
        b_gl = tl.sum(b_g, 0) * LOG2E
        b_hb = b_h.to(tl.bfloat16)
        b_x = b_v.to(tl.float32) - tl.dot(b_k, b_hb) * tl.exp2(b_gam)[:, None]
        b_vn = tl.dot(b_tb, b_x.to(tl.bfloat16))
        # one tile, V~ 2^f, for both dots (P came scaled by 2^-f from the prep); the order below is
        # ptxas's: Q S formed after the V~ tiles spills 64 B/thread less (sm_90)
        b_f = tl.load(f_ptr + (bos + o_r) * HV + i_h, mask=m_r, other=0.0)
        b_vd = (b_vn * tl.exp2(b_f)[:, None]).to(tl.bfloat16)
        b_o = _qs_f32(b_q, b_hb, b_gam, scale) + tl.dot(b_p, b_vd)
        tl.store(p_o + (o_r[:, None] * (HV * V) + o_v[None, :]), b_o.to(tl.bfloat16), mask=m_r[:, None])
        # the integer part of gl - gam that f leaves (rounded: robust to ulps)
        b_kd = (b_k * tl.exp2(tl.floor(b_gl - b_gam - b_f + 0.5))[:, None]).to(tl.bfloat16)
        b_h = _carry(b_h, b_kd, b_vd, b_gl)
    if j == nseg - 1:
        tl.store(ht_ptr + ((seq * HV + i_h) * K + o_k[:, None]).to(tl.int64) * V + o_v[None, :], b_h)


# ----------------------------------------------------------------------------------------------
# host side: glue only (allocation, grids); every operator FLOP is in the kernels above


def _seg_chunks(T: int, N: int, HV: int, V: int, cfg: dict) -> int:
    """Segment length in chunks (CP policy). Uses host-known sizes only: no sync."""
    nt = triton.cdiv(T, BT)
    no_cp = nt + 1  # longer than any sequence can be
    if not cfg["cp"]:
        return no_cp
    nv = V // cfg["BV"]
    if N * HV * nv >= cfg["cp_min_programs"]:
        return no_cp
    seg = max(cfg["cp_min_seg_chunks"], triton.cdiv(nt * HV * nv, cfg["cp_target_programs"]))
    return min(seg, no_cp)


def _prep(q, k, g, beta, cu, cuc, tb, pbuf, fdec, N, scale, log_n, nt_bound, cfg):
    """_prep64_kernel: Tb [T, HV, BT] into tb, P [T, HV, BT] into pbuf and f [T, HV] into fdec (what the
    Tb tests call alone)."""
    T, HK, K = q.shape
    HV = g.shape[1]
    # 4 warps: 222 registers, no spill (ptxas sm_90, Triton 3.6), two programs per SM; 8 warps ran 1.4x
    # slower (H100, 2026-12-05). The kernel has no loop, so num_stages is Triton's default.
    _prep64_kernel[(HV, nt_bound)](
        q, k, g, beta, cu, cuc, tb, pbuf, fdec, N, scale, HV=HV, HK=HK, K=K, BT=BT, LOG_N=log_n,
        PREC=cfg["prep_prec"], num_warps=4,
    )


def gdn_prefill(q, k, v, g, beta, cu_seqlens, initial_state=None, scale=None, cp_segment_chunks=None):
    """q, k [T, HK, K] bf16; v [T, HV, V] bf16; g, beta [T, HV] fp32; cu_seqlens [N+1] int32;
    initial_state [N, HV, K, V] fp32 or None -> (o [T, HV, V] bf16, final_state [N, HV, K, V] fp32).
    cp_segment_chunks (the contract's knob): segments of exactly that many chunks, context parallelism forced."""
    return forward(q, k, v, g, beta, cu_seqlens, initial_state, scale, CONFIG, cp_segment_chunks)


def forward(q, k, v, g, beta, cu_seqlens, initial_state: torch.Tensor | None, scale, cfg: dict,
            cp_segment_chunks: int | None = None):
    """gdn_prefill with an explicit config (cfg over CONFIG: a stored config without a newer key keeps
    working with that key's default). q, k [T, HK, K]; v [T, HV, V]; g, beta [T, HV]; cu_seqlens [N+1];
    initial_state [N, HV, K, V] or None -> (o [T, HV, V], final_state [N, HV, K, V])."""
    cfg = {**CONFIG, **cfg}
    T, HK, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    N = cu_seqlens.numel() - 1
    scale = K**-0.5 if scale is None else float(scale)
    dev = q.device
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    g, beta = g.contiguous().float(), beta.contiguous().float()
    cu = cu_seqlens.to(torch.int32).contiguous()
    o = torch.empty(T, HV, V, dtype=v.dtype, device=dev)
    ht = torch.empty(N, HV, K, V, dtype=torch.float32, device=dev)
    has_h0 = initial_state is not None
    h0 = initial_state.contiguous().float() if has_h0 else ht  # dummy pointer when absent
    if N == 0:
        return o, ht

    seg = _seg_chunks(T, N, HV, V, cfg) if cp_segment_chunks is None else max(1, int(cp_segment_chunks))
    log_n = max(1, int(N).bit_length()) + 1
    idx = torch.empty(2, N + 1, dtype=torch.int32, device=dev)
    cuc, cus = idx[0], idx[1]
    _index_kernel[(1,)](cu, cuc, cus, N, seg, BT=BT, BLOCK=max(16, triton.next_power_of_2(N)))

    nt_bound = triton.cdiv(T, BT) + N  # sum_i ceil(len_i / 64) <= T/64 + N
    nseg_bound = triton.cdiv(nt_bound, seg) + N
    tb = torch.empty(T, HV, BT, dtype=torch.bfloat16, device=dev)
    pbuf = torch.empty(T, HV, BT, dtype=torch.bfloat16, device=dev)
    fdec = torch.empty(T, HV, dtype=torch.float32, device=dev)
    if T > 0:
        _prep(q, k, g, beta, cu, cuc, tb, pbuf, fdec, N, scale, log_n, nt_bound, cfg)
    mc = ht  # dummy when CP is off
    if seg < triton.cdiv(T, BT):  # some sequence may have several segments
        mc = torch.empty(nseg_bound, HV, K, K + V, dtype=torch.float32, device=dev)
        warm = torch.empty(nseg_bound, HV, dtype=torch.int32, device=dev)
        bva, nwarm = cfg["BVA"], cfg["cp_warm_chunks"]
        _seg_kernel[((K + V) // bva, HV, nseg_bound)](
            k, v, g, tb, h0, mc, warm, cu, cus, N, seg, float(cfg["cp_warm_log_decay"]), HV=HV, HK=HK, K=K, V=V,
            BT=BT, BVA=bva, LOG_N=log_n, HAS_H0=has_h0, WARM=nwarm, LOOP_STAGES=cfg["seg_loop_stages"],
            num_warps=cfg["seg_warps"], num_stages=1,
        )
        bvc = cfg["BVC"]
        _chain_kernel[(V // bvc, HV, N)](mc, warm, cus, N, HV=HV, K=K, V=V, BVC=bvc, BKC=32, PREC="tf32",
                                            WARM=nwarm, num_warps=4, num_stages=1)  # stages>1: 256 KB smem
    bv = cfg["BV"]
    _fwd_kernel[(V // bv, HV, nseg_bound)](
        q, k, v, g, tb, pbuf, fdec, o, h0, ht, mc, cu, cus, N, seg, scale, HV=HV, HK=HK, K=K, V=V, BT=BT,
        BV=bv, LOG_N=log_n, HAS_H0=has_h0, LOOP_STAGES=cfg["fwd_loop_stages"], num_warps=cfg["fwd_warps"],
        num_stages=1,  # > 1: out-of-range shared address on the H200 (Triton 3.6)
    )
    return o, ht


def extra_memory_bytes(T: int, N: int, HV: int, K: int = 128, V: int = 128, cfg: dict | None = None) -> int:
    """Device bytes allocated beyond inputs and outputs: Tb, P and f, the CP transitions, the indices."""
    cfg = {**CONFIG, **(cfg or {})}
    seg = _seg_chunks(T, N, HV, V, cfg)
    nt_bound = triton.cdiv(T, BT) + N
    b = T * HV * (BT * 2 * 2 + 4) + 2 * (N + 1) * 4
    if seg < triton.cdiv(T, BT):
        b += (triton.cdiv(nt_bound, seg) + N) * HV * (K * (K + V) * 4 + 4)
    return b


_ = math  # math is whitelisted; kept for callers that compute scales
