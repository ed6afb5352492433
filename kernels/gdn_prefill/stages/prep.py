"""Stage 1, the prep: per chunk of 64 tokens and value head, Tb = (I + A)^-1 diag(beta) and P = scale
(Q K^T . Gamma . causal) with its column scales f, every product a tensor-core dot (FlashQLA's kkt_solve
does the same job). The forward stage reads both; nothing else of the chunk leaves this kernel."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import BT, LOG2E, _chunk_t0, _locate


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
