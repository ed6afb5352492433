"""Stage 3, the forward: per segment, value head and block of value columns, the chunk recurrence
with its outputs from the segment's entering state (h0, or the chain's result); writes o and the
final state. V~, the per-chunk states and the gates' products never leave registers."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import BT, BV, LOG2E, _carry, _Launch, _ld, _locate


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
def _qs_f32(b_q, b_hb, b_gam, scale):
    """scale diag(e^gamma) Q S with e^gamma as 2^floor (exact on the bf16 q) times 2^frac (on fp32 Q S)."""
    b_gq = tl.floor(b_gam)
    return tl.dot((b_q * tl.exp2(b_gq)[:, None]).to(tl.bfloat16), b_hb) * (tl.exp2(b_gam - b_gq) * scale)[:, None]


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


_FWD_LAUNCH = _Launch(_fwd_kernel)
# 4 warps with Triton's pipeliner on the serial loop (2 stages): 255 registers + 144 B spill (ptxas sm_90,
# Triton 3.6), so two programs share an SM and hide each other's latency; with the pipelined loop the
# serial kernel went from 404 to 145 us at G1 (H200). 8 warps ran 0.62-0.82x (geomean, H200, 2026-12-01)
# and >= 10% slower in the 2026-12-04 screens; 1 loop stage 0.89-0.91x (2026-12-01/02); 3 slower.
_FWD_WARPS = 4
_FWD_LOOP_STAGES = 2
# Triton's interpreter (TRITON_INTERPRET=1 when this module was imported) makes every @triton.jit kernel an
# InterpretedFunction, which has no per-device compile caches; the Gluon forward cannot run there, so the
# entry's "auto" takes this forward (the environment itself is out of a kernel module's reach: aka's policy)
_INTERPRETED = not hasattr(_fwd_kernel, "device_caches")


def _fwd(q, k, v, g, tb, pbuf, fdec, o, h0, ht, mc, cu, cus, N, seg, nseg_bound, scale, log_n, has_h0, cfg,
         key=None):
    """_fwd_kernel over every segment: q, k [T, HK, K] bf16; v [T, HV, V] bf16; g [T, HV] fp32; Tb and P
    [T, HV, BT] bf16; f [T, HV] fp32; h0 [N, HV, K, V] fp32 (any tensor when has_h0 is False); [M | C]
    [segments, HV, K, K + V] fp32 (any tensor without CP) -> o [T, HV, V] bf16 and the final states
    ht [N, HV, K, V] fp32, written in place. key: the entry's launch key (_Launch)."""
    T, HK, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    _FWD_LAUNCH((V // BV, HV, nseg_bound), (q, k, v, g, tb, pbuf, fdec, o, h0, ht, mc, cu, cus, N, seg, scale),
                dict(HV=HV, HK=HK, K=K, V=V, BT=BT, BV=BV, LOG_N=log_n, HAS_H0=has_h0,
                     LOOP_STAGES=_FWD_LOOP_STAGES, num_warps=_FWD_WARPS,
                     num_stages=1), key)  # > 1: out-of-range shared address on the H200 (Triton 3.6)
