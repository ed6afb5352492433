"""Stage 1, the prep: per chunk of 64 tokens and value head, Tb = (I + A)^-1 diag(beta) and, for the Triton
forward only, P = scale (Q K^T . Gamma . causal) with its column scales f, every product a tensor-core dot
(FlashQLA's kkt_solve does the inverse; its fused forward forms Q K^T, as the Gluon forward, fwd_ws.py,
does). The forward stage reads them; nothing else of the chunk leaves this kernel."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import BT, LOG2E, _index, _Launch


@triton.jit
def _blocks(b_a4, o_4, D: tl.constexpr):
    """[4, 16, 16]: batch r holds A's 16x16 block (r, r - D), zero for r < D (b_a4: A as [4, 16, 4, 16])."""
    m = (o_4[None, :] == o_4[:, None] - D)[:, None, :, None]
    return tl.sum(tl.where(m, b_a4, 0.0), 2)


@triton.jit
def _shift(b_x, o_4, D: tl.constexpr):
    """[4, 16, 16]: batch r holds b_x's batch r - D, zero for r < D."""
    m = (o_4[None, :] == o_4[:, None] - D)[:, :, None, None]
    return tl.sum(tl.where(m, b_x[None, :, :, :], 0.0), 1)


@triton.jit
def _prep64_kernel(
    q_ptr, k_ptr, g_ptr, beta_ptr, cu_ptr, cuc_ptr, cus_ptr, tb_ptr, p_ptr, f_ptr, N, SEG, scale,
    HV: tl.constexpr, HK: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BLOCK: tl.constexpr,
    WITH_P: tl.constexpr,
):
    """Tb [T, HV, BT], and with WITH_P P [T, HV, BT] and f [T, HV], of one chunk and value head (q, k
    [T, HK, K] bf16; g, beta [T, HV] fp32). Without WITH_P (the Gluon forward forms P and f itself) q, p_ptr
    and f_ptr are never read or written and Tb is the same computation.

    K K^T and (WITH_P) Q K^T are [BT, BT] tensor-core dots; P is formed first (Q K^T is then dead), then A.
    The inverse works on 16x16 blocks as [4, 16, 16] batches (batch r = block row r), every product a
    batched tf32 dot: the four diagonal blocks are inverted together by the series
    (I - D)(I + D^2)(I + D^4)(I + D^8) (D^16 = 0), then block forward substitution fills the block
    diagonals below, F_d[r] = T_{r,r-d} = -T_r sum_{e=1..d} A_{r,r-e} T_{r-e,r-d}. T is stored from its
    [4, 16, 4, 16] form, never gathered into one [BT, BT] tile. This replaced two doubling steps of
    [BT, BT] dots (T <- T - T (L T)): prep alone 115.5 -> 95.6 us at G1, 214.3 -> 175.0 at G8 (H100,
    2026-12-05, scripts/device/gdn_prep_probe.py), 126 instead of 164 registers (ptxas sm_90, Triton 3.6).
    Addresses: one 64-bit base per tile plus int32 offsets (64-bit offset tensors cost ~90 registers).

    Each program finds its chunk from cu_seqlens itself (_index), and program (0, 0) writes the chunk and
    segment index [N+1] the later stages read (cuc, cus; SEG chunks a segment): the index had a launch of its
    own before, ~8 us of host time a call (H100 host, 2026-12-07, docs/perf/host.md)."""
    i_h = tl.program_id(0)
    i_c = tl.program_id(1)
    seq, t0, eos = _index(cu_ptr, cuc_ptr, cus_ptr, N, SEG, i_c, (i_h == 0) & (i_c == 0), BT, BLOCK)
    if seq >= N:
        return
    i_hk = i_h // (HV // HK)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    o_4 = tl.arange(0, 4)
    o_16 = tl.arange(0, 16)
    m_t = o_t < eos - t0
    o_qk = o_t[:, None] * (HK * K) + o_k[None, :]
    b_k = tl.load(k_ptr + (t0 * HK + i_hk) * K + o_qk, mask=m_t[:, None], other=0.0)
    b_kk = tl.dot(b_k, tl.trans(b_k))
    if WITH_P:  # issued where the Triton forward's prep always had them (before the gate loads)
        b_q = tl.load(q_ptr + (t0 * HK + i_hk) * K + o_qk, mask=m_t[:, None], other=0.0)
        b_qk = tl.dot(b_q, tl.trans(b_k))
    b_g = tl.load(g_ptr + (t0 * HV + i_h) + o_t * HV, mask=m_t, other=0.0)
    b_beta = tl.load(beta_ptr + (t0 * HV + i_h) + o_t * HV, mask=m_t, other=0.0)
    b_gam = tl.cumsum(b_g, 0) * LOG2E
    b_gl = tl.sum(b_g, 0) * LOG2E
    p_tb = tb_ptr + (t0 * HV + i_h) * BT  # this chunk's first row; offsets from it are int32
    if WITH_P:
        # P = scale (Q K^T . Gamma . causal), column j scaled by 2^-f_j, f_j = frac(gl - gam_j) stored beside
        # it: the forward kernel's one V~ 2^f tile then serves both P V~ and the state update (_fwd_kernel)
        p_p = p_ptr + (t0 * HV + i_h) * BT
        b_dl = b_gl - b_gam
        b_n = tl.floor(b_dl)
        tl.store(f_ptr + (t0 * HV + i_h) + o_t * HV, b_dl - b_n, mask=m_t)
        b_lg = (b_gam - b_gl)[:, None] + b_n[None, :]
        b_lg = tl.where(o_t[:, None] >= o_t[None, :], b_lg, float("-inf"))
        o_tt = o_t[:, None] * (HV * BT) + o_t[None, :]
        tl.store(p_p + o_tt, (b_qk * tl.exp2(b_lg) * scale).to(tl.bfloat16), mask=m_t[:, None])
    # A = strictly_lower(diag(beta) (K K^T . Gamma)); the exponent is <= 0 below the diagonal
    b_lg = tl.where(o_t[:, None] > o_t[None, :], b_gam[:, None] - b_gam[None, :], float("-inf"))
    b_a4 = tl.reshape(b_kk * tl.exp2(b_lg) * b_beta[:, None], [4, 16, 4, 16])
    b_d = _blocks(b_a4, o_4, 0)
    b_i = tl.where((o_16[:, None] == o_16[None, :])[None, :, :], 1.0, 0.0)
    b_d2 = tl.dot(b_d, b_d, input_precision="tf32")
    b_d4 = tl.dot(b_d2, b_d2, input_precision="tf32")
    b_d8 = tl.dot(b_d4, b_d4, input_precision="tf32")
    b_t = tl.dot(b_i - b_d, b_i + b_d2, input_precision="tf32")
    b_t = tl.dot(b_t, b_i + b_d4, input_precision="tf32")
    b_t = tl.dot(b_t, b_i + b_d8, input_precision="tf32")
    b_e1 = _blocks(b_a4, o_4, 1)
    b_e2 = _blocks(b_a4, o_4, 2)
    b_f1 = -tl.dot(b_t, tl.dot(b_e1, _shift(b_t, o_4, 1), input_precision="tf32"), input_precision="tf32")
    b_x = tl.dot(b_e1, _shift(b_f1, o_4, 1), input_precision="tf32")
    b_x += tl.dot(b_e2, _shift(b_t, o_4, 2), input_precision="tf32")
    b_f2 = -tl.dot(b_t, b_x, input_precision="tf32")
    b_x = tl.dot(b_e1, _shift(b_f2, o_4, 1), input_precision="tf32")
    b_x += tl.dot(b_e2, _shift(b_f1, o_4, 2), input_precision="tf32")
    b_x += tl.dot(_blocks(b_a4, o_4, 3), _shift(b_t, o_4, 3), input_precision="tf32")
    b_f3 = -tl.dot(b_t, b_x, input_precision="tf32")
    i_r4 = o_4[:, None, None, None]
    i_c4 = o_4[None, None, :, None]
    b_tt = tl.where(i_c4 == i_r4 - 3, b_f3[:, :, None, :], 0.0)
    b_tt = tl.where(i_c4 == i_r4 - 2, b_f2[:, :, None, :], b_tt)
    b_tt = tl.where(i_c4 == i_r4 - 1, b_f1[:, :, None, :], b_tt)
    b_tt = tl.where(i_c4 == i_r4, b_t[:, :, None, :], b_tt)
    o_r4 = i_r4 * 16 + o_16[None, :, None, None]
    o_c4 = i_c4 * 16 + o_16[None, None, None, :]
    b_bc = tl.load(beta_ptr + (t0 * HV + i_h) + o_c4 * HV, mask=o_c4 < eos - t0, other=0.0)
    tl.store(p_tb + o_r4 * (HV * BT) + o_c4, (b_tt * b_bc).to(tl.bfloat16), mask=o_r4 < eos - t0)


_PREP_LAUNCH = _Launch(_prep64_kernel)


def _prep(q, k, g, beta, cu, cuc, cus, tb, pbuf, fdec, N, seg, scale, block, nt_bound, cfg, key=None):
    """_prep64_kernel: q, k [T, HK, K] bf16; g, beta [T, HV] fp32; cu [N+1] int32 -> the index cuc, cus [N+1]
    int32 (segments of seg chunks; block: a power of two >= N) and Tb [T, HV, BT] bf16 into tb and, when
    cfg["fwd"] == "triton", P [T, HV, BT] bf16 into pbuf and f [T, HV] fp32 into fdec (what the Tb tests call
    alone). The Gluon forward ("ws") forms P and f from q, k and g itself, so there pbuf and fdec are never
    touched (any tensors of those dtypes). key: the entry's launch key (_Launch; it holds cfg)."""
    T, HK, K = q.shape
    HV = g.shape[1]
    # 4 warps: 126 registers, no spill (ptxas sm_90, Triton 3.6); 8 warps ran 1.4x slower (H100,
    # 2026-12-05, the doubling prep). The kernel has no loop, so num_stages is Triton's default.
    # T = 0 launches too (nt_bound >= N >= 1 programs a head, none with a chunk): (0, 0) writes the index
    _PREP_LAUNCH((HV, nt_bound), (q, k, g, beta, cu, cuc, cus, tb, pbuf, fdec, N, seg, scale),
                 dict(HV=HV, HK=HK, K=K, BT=BT, BLOCK=block, WITH_P=cfg["fwd"] == "triton", num_warps=4), key)
