"""Stage 2, context parallelism (only when a sequence is cut into segments): each segment's affine
transition S_out = M S_in + C (_seg_kernel, the segments in parallel), then the short serial chain
that turns them into every segment's entering state (_chain_kernel). _seg_chunks is the policy that
decides the segment length from host-known sizes, so the launch needs no sync."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import BT, BV, LOG2E, _carry, _Launch, _ld, _locate


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


def _seg_chunks(T: int, N: int, HV: int, V: int, cfg: dict, sms: int = 0) -> int:
    """Segment length in chunks (CP policy): the first of _cp_policy's numbers."""
    return _cp_policy(T, N, HV, V, cfg, sms)[0]


def _cp_policy(T: int, N: int, HV: int, V: int, cfg: dict, sms: int = 0) -> tuple[int, bool]:
    """(segment length in chunks, whether the Gluon forward splits each head over two CTAs). Host-known
    sizes only (and the GPU's SM count): no sync. A length of ceil(T / BT) + 1 means no CP.

    Three rules. By default segments of chunks * HV * (V / BV) / cp_target_programs chunks (two waves of
    the Gluon forward's one-CTA-per-SM grid). For the Gluon forward (cfg["fwd"] == "ws") on a GPU of sms
    SMs, where the split below does not apply, one wave instead (sms // HV segments over the N sequences,
    each sequence but the first taking one of them for its ragged end) whenever that keeps segments at or
    below cp_one_wave_max_seg chunks and no longer than the two-wave forward's chains (its waves times its
    segment length, ragged ends left out): a second wave of short segments costs more transition work and
    CTA start-ups than it saves, and a wave of segments longer than the two-wave chains loses on the chain.
    H100, graph replay, every segment length forced in one process (scripts/device/gdn_config_sweep.py,
    2026-12-06): one wave won at 16 chunks (G2 157.1 against 185.1 us) and 32 (G10 218.8 against 245.2),
    tied at 32 (G1 280.1 both), lost where its segments ran longer than the two-wave chains (G6: 43
    against 2 x 16, 353.7 / 273.3), lost at G8 and G9 (64 chunks; the split takes both now) and won at G4
    (128 chunks, as long as 2 x 64: 1.05x). One aka bench call, same inputs (H100, 2026-12-07): G4 763.4
    -> 731.5 us, G3 (64 chunks, as long as 2 x 32) 436.0 -> 403.4, where that sweep (one input, warm-up
    e^-14) had read G3 515.8 against 490.6. Off the full set, unmeasured: 64 heads at 4096 tokens split
    (the split is checked first), 2 x 2048 tokens at 32 heads take two waves of 8 (the guard).

    Where the two-wave rule would cut segments, the Gluon forward split instead (two CTAs a head, each with
    two 32-column chains; fwd_ws.py) and no CP, when the split grid fits one wave (2 N HV <= sms) and CP's
    forward would still run at least ws_split_cp_steps percent of the chain's steps (its waves times its
    segment length, against ceil(T / BT); 0: never): CP then saves too little of the chain to pay for its
    transition pass, and the split forward's shorter chains run each step faster."""
    nt = triton.cdiv(T, BT)
    no_cp = nt + 1  # longer than any sequence can be
    if not cfg["cp"]:
        return no_cp, False
    nv = V // BV
    if N * HV * nv >= cfg["cp_min_programs"]:
        return no_cp, False
    ws = cfg["fwd"] == "ws" and sms
    seg = max(cfg["cp_min_seg_chunks"], triton.cdiv(nt * HV * nv, cfg["cp_target_programs"]))
    pct = cfg["ws_split_cp_steps"]
    if ws and pct and seg < nt and 2 * N * HV <= sms:  # the split replaces CP; a sequence CP keeps whole stays
        steps = triton.cdiv((triton.cdiv(nt, seg) + N - 1) * HV, sms) * seg  # CP's forward: waves x segment
        if 100 * steps >= pct * nt:
            return no_cp, True
    if ws and cfg["cp_one_wave_max_seg"]:
        nseg = sms // HV - (N - 1)
        if nseg >= 2:
            seg1 = triton.cdiv(nt, nseg)
            steps = triton.cdiv(triton.cdiv(nt, seg) * HV, sms) * seg  # the two-wave chains, ragged ends left out
            if cfg["cp_min_seg_chunks"] <= seg1 <= min(cfg["cp_one_wave_max_seg"], steps):
                return seg1, False
    return min(seg, no_cp), False


_SEG_LAUNCH = _Launch(_seg_kernel)
_CHAIN_LAUNCH = _Launch(_chain_kernel)


def _cp_states(k, v, g, tb, h0, cu, cus, N, seg, nseg_bound, log_n, has_h0, cfg, key=None):
    """Every segment's entering state: k [T, HK, K] bf16; v [T, HV, V] bf16; g [T, HV] fp32; Tb [T, HV, BT]
    bf16; h0 [N, HV, K, V] fp32 (any tensor when has_h0 is False); cu [N+1], cus (segment prefix sums)
    [N+1] int32 -> [M | C] [nseg_bound, HV, K, K + V] fp32 whose C part of segment j holds the state
    entering segment j + 1 (what _fwd_kernel reads). key: the entry's launch key (_Launch)."""
    HV, HK, K, V = v.shape[1], k.shape[1], k.shape[2], v.shape[2]
    mc = torch.empty(nseg_bound, HV, K, K + V, dtype=torch.float32, device=k.device)
    warm = torch.empty(nseg_bound, HV, dtype=torch.int32, device=k.device)
    bva, nwarm = cfg["BVA"], cfg["cp_warm_chunks"]
    _SEG_LAUNCH(((K + V) // bva, HV, nseg_bound),
                (k, v, g, tb, h0, mc, warm, cu, cus, N, seg, float(cfg["cp_warm_log_decay"])),
                dict(HV=HV, HK=HK, K=K, V=V, BT=BT, BVA=bva, LOG_N=log_n, HAS_H0=has_h0, WARM=nwarm,
                     LOOP_STAGES=cfg["seg_loop_stages"], num_warps=cfg["seg_warps"], num_stages=1), key)
    bvc = cfg["BVC"]
    _CHAIN_LAUNCH((V // bvc, HV, N), (mc, warm, cus, N),
                  dict(HV=HV, K=K, V=V, BVC=bvc, BKC=32, PREC="tf32", WARM=nwarm, num_warps=4,
                       num_stages=1), key)  # stages > 1: 256 KB of shared memory
    return mc
