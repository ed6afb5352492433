"""Stage 3 in Gluon for Hopper (sm_90a), chosen by CONFIG["fwd"] "ws" (and by "auto", the default, where it
runs): the forward of fwd.py
(_fwd_kernel's maths, inputs and outputs) warp-specialised, with two independent recurrence
warpgroups per CTA so that two serial chains share an SM and hide each other's latency.

One CTA per (value head i_h, segment i_s), grid (HV, segments): the CTA owns all V = 128 value columns
of the head's state, split in two halves of BW = 64 columns. The recurrence is independent per value
column (S[:, cols] needs only q, k, v[:, cols], Tb and g), so each half runs in its own warpgroup with
no barrier between the two but the load ring's. Per chunk of BT = 64 tokens, from the state half
S_w [K, BW] fp32 (gam = chunk-local cumsum of g and gl = sum g, both in log2 units; rows >= L read
g = 0, so gam is flat there; n = floor(gl - gam) and f = (gl - gam) - n, on the rows):
    x  = v[:, cols] - (k @ bf16(S_w)) 2^gam       rows >= L zeroed
    vd = bf16((Tb @ bf16(x)) 2^f)                 rows >= L zeroed
    P  = bf16(scale (q @ k^T) 2^(gam_i - gl + n_j))  j <= i, else 0 (where, never a product with 0)
    o  = (q @ bf16(S_w)) 2^gam scale + P @ vd      rows >= L never stored
    S_w = S_w 2^gl + k^T @ bf16(vd 2^n)
P and f are the prep's (prep.py, WITH_P) formed here instead: P_ij = scale (q_i . k_j) 2^(gam_i - gam_j - f_j),
so P @ vd = scale (Q K^T . Gamma . causal) V~ as in _fwd_kernel, and one vd tile serves both P @ vd and
the update. The prep skips q, Q K^T and the P and f stores when this forward runs (cfg["fwd"] == "ws").
(The k^T-side scale 2^n of _fwd_kernel moved onto vd: a power of two, so the products are the same bar
underflow far below the tolerances, and the k tile in shared memory serves the update unmodified, as
the transposed A operand of the wgmma; _fwd_kernel's floor(gl - gam - f + 1/2) is n exactly here, f and
n coming from the same gam.)

Partitions (gl.warp_specialize; 9 warps, launched as 12: setmaxnreg works per warpgroup):
  default, 4 warps  recurrence warpgroup 0 (columns 0..63): S_0 in registers for the whole segment,
                    its own hs/xs/vd tiles, its own outputs.
  worker 0, 4 warps recurrence warpgroup 1 (columns 64..127), the same function with W = 1.
  worker 1, 1 warp  the TMA loader: per chunk k, v (the head's 128 columns), Tb, q into a ring of
                    STAGES slots.
Per chunk a warpgroup issues u = k hs and o = q hs together (async; the tensor core has the second
while the registers wait for the first), waits for u only (1 outstanding: o), forms x, issues vn = Tb xs
and then qk = q k^T, waits for o and vn (1 outstanding: qk, which the tensor core runs while the
registers form vd and vdk), issues the state update (the serial chain's product), waits for qk (1
outstanding: the update), forms P in registers while the update runs, issues o += P vd (P the register
A operand) and waits for both (0 outstanding). wgmma groups retire in issue order, so each count leaves
exactly the products issued after the one waited for: u | o, vn | qk, update | P vd.

Shared memory (STAGES = 2; all tiles NVMMA 128-byte swizzled, what TMA writes and wgmma reads):
ring 2 x (k 16 + q 16 + v 16 + Tb 8 KB) = 112 KB; per warpgroup hs [K, BW] 16 KB, xs [BT, BW]
8 KB (bf16(x), then vdk once the Tb product that read x is complete), vd [BT, BW] 8 KB: 176 KB of 227
(plus the layout conversions' scratch, gdn_ws_compile.py prints the total).

Barriers (mbarrier, shared memory). An arrival is one per partition (Triton predicates it on the
partition's first thread), so a count is the number of partitions that arrive per phase. Chunk c of
the segment uses ring slot c % STAGES; n_use = c // STAGES counts that slot's uses.
  ld_ready[s]  count 1: the loader's expect-tx arrival, completed by the TMA bytes of the four tiles
               (k, v, Tb, q: 56 KB). Both recurrence warpgroups wait parity n_use & 1.
  ld_empty[s]  count 2: each recurrence warpgroup arrives once per use, after the wgmma wait that
               retires its last products of the chunk (the last reads of k, q, Tb; its v half was read
               into registers before the warpgroup barrier that follows the xs store). The loader waits
               parity (n_use & 1) ^ 1: a fresh barrier's previous phase counts as complete, so the first
               pass over the ring does not block; later passes wait for both releases of the last use.
No barrier can run two phases ahead of a waiter: the loader refills slot s only after both warpgroups
released its previous use, which each does only after waiting that use's ld_ready. The warpgroups
never wait on each other (each owns its hs/xs/vd), so one may run up to STAGES chunks ahead of the other.
Every partition loops over the same n_ch chunks, so a segment of 0 chunks (an empty sequence) touches
no barrier: each warpgroup writes its half of the final state (h0 or zeros) and every partition exits.

Generic-proxy shared stores (hs, xs, vd) are followed by fence_async_shared (they feed wgmma, the async
proxy) and a warpgroup barrier (gl.thread_barrier: every warp has written before the MMA issue).
Every wgmma of a chunk is retired (warpgroup_mma_wait 0) before the next chunk's stores into the tiles
it read. Rows >= L of the last chunk: TMA reads the next sequence's rows there (zeros past T), so x and
vd are zeroed on those rows with where (their products then add nothing to S and o) and the o stores
are masked; P's columns j >= L meet those zero vd rows (and lie above the diagonal of every stored row);
g is a plain masked load, issued a chunk ahead.
Registers (setmaxnreg): the worker warpgroup _WS_REGS, the loader's warpgroup _WS_REGS_LOAD;
Triton 3.6 gives the default partition what is left of the 64K (scripts/device/gdn_ws_compile.py
prints the values and the spills). With P formed here both recurrence warpgroups run at 240 and
peak at 232-235 live registers without a spill (ptxas sm_90a, Triton 3.6, offline, nvdisasm -plr);
_ws_rec says which two choices keep it so.
Requires sm_90a and Triton's Gluon (3.6 on the device): Triton's interpreter cannot run it, so the
CPU path keeps fwd.py's kernel (CONFIG["fwd"] = "triton").
Measured (H100 80GB HBM3, Triton 3.6.0, torch 2.11.0+cu130, 2026-12-06; docs/perf/gdn_prefill.md): the
gate passes on smoke, edge and full (2 rounds; o equals the Triton forward's bit for bit on E1-E9 and S1);
end to end under graph replay 1.04-1.10x the Triton forward on all ten full shapes (G1 300.7 vs 319.1 us,
G8 549.7 vs 585.2). One recurrence warpgroup of 128 columns a CTA (commit 55b66bc) had lost everywhere
(0.68-0.98x): one serial chain an SM, barrier stalls 40%.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .common import BT, LOG2E, _Launch
from .fwd import _fwd


@gluon.jit
def _ws_add(a, b):
    return a + b


@gluon.jit
def _ws_locate(cu_ptr, idx, N, LOG_N: gl.constexpr):
    """Largest s in [0, N] with cu[s] <= idx (common._locate in Gluon)."""
    lo = idx * 0
    hi = lo + N
    for _ in gl.static_range(LOG_N):
        mid = (lo + hi + 1) // 2
        ok = gl.load(cu_ptr + mid) <= idx
        lo = gl.where(ok, mid, lo)
        hi = gl.where(ok, hi, mid - 1)
    return lo


@gluon.jit
def _ws_gate_loads(g_ptr, t0, t_stop, i_h, HV: gl.constexpr, BT: gl.constexpr):
    """One chunk's g on a plain blocked vector (for the scan); t0 is the chunk's first token and t_stop the
    sequence's end (absolute); rows at or past t_stop read 0. Issued a chunk ahead: the load is strided by
    HV (one line a row), and waited for in the same chunk it puts a global round trip on the serial path
    of every chunk."""
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    o_t = t0 + gl.arange(0, BT, layout=vec_l)
    return gl.load(g_ptr + (o_t.to(gl.int64) * HV + i_h), mask=o_t < t_stop, other=0.0)


@gluon.jit
def _ws_gates(b_g, t0, t_stop, BT: gl.constexpr, row_l: gl.constexpr):
    """gam = cumsum(g) and gl = sum(g) in log2 units: gam on the accumulator rows and on g's own layout
    (the caller moves P's column scales from there onto the columns when it forms P), gl, and the rows'
    validity."""
    b_gam = gl.associative_scan(b_g, 0, _ws_add) * LOG2E
    b_gl = gl.sum(b_g, 0) * LOG2E
    m_r = (t0 + gl.arange(0, BT, layout=row_l)) < t_stop
    return gl.convert_layout(b_gam, row_l), b_gl, b_gam, m_r


@gluon.jit
def _ws_loader(q_desc, k_desc, v_desc, tb_desc, q_s, k_s, v_s, tb_s, ld_ready, ld_empty,
               row0, col_qk, col_v, col_tb, n_ch, BT: gl.constexpr, STAGES: gl.constexpr):
    """TMA of chunk c's four tiles into slot c % STAGES, once both warpgroups released its last use."""
    nbytes: gl.constexpr = (q_desc.block_type.nbytes + k_desc.block_type.nbytes + v_desc.block_type.nbytes
                            + tb_desc.block_type.nbytes)
    for c in range(n_ch):
        slot = c % STAGES
        mbarrier.wait(ld_empty.index(slot), ((c // STAGES) & 1) ^ 1)
        bar = ld_ready.index(slot)
        mbarrier.expect(bar, nbytes)
        row = row0 + c * BT
        # the first products' operands first: u = k hs, then x needs v, then Tb; q later
        tma.async_copy_global_to_shared(k_desc, [row, col_qk], bar, k_s.index(slot))
        tma.async_copy_global_to_shared(v_desc, [row, col_v], bar, v_s.index(slot))
        tma.async_copy_global_to_shared(tb_desc, [row, col_tb], bar, tb_s.index(slot))
        tma.async_copy_global_to_shared(q_desc, [row, col_qk], bar, q_s.index(slot))


@gluon.jit
def _ws_segment(cu_ptr, cus_ptr, N, SEG, LOG_N: gl.constexpr, BT: gl.constexpr):
    """Program i_s's segment (grid axis 1): its sequence (N for a surplus program), index j in the
    sequence, the sequence's segment count, first token and length, and the segment's first local token
    and chunk count."""
    i_s = gl.program_id(1)
    seq = _ws_locate(cus_ptr, i_s, N, LOG_N)
    s_in = gl.minimum(seq, N - 1)  # a surplus program's reads stay inside cu and cus
    s0 = gl.load(cus_ptr + s_in)
    nseg = gl.load(cus_ptr + s_in + 1) - s0
    j = i_s - s0
    bos = gl.load(cu_ptr + s_in)
    L = gl.load(cu_ptr + s_in + 1) - bos
    t_beg = j * SEG * BT
    n_ch = gl.maximum(gl.minimum(t_beg + SEG * BT, L) - t_beg + BT - 1, 0) // BT  # 0 for an empty sequence
    return seq, j, nseg, bos, L, t_beg, n_ch


@gluon.jit
def _ws_rec(W: gl.constexpr, k_s, q_s, v_s, tb_s, hs_all, xs_all, vd_all, ld_ready, ld_empty,
            g_ptr, o_ptr, h0_ptr, ht_ptr, mc_ptr, i_h, seq, j, nseg, t_first, t_stop, n_ch, scale,
            HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr, BW: gl.constexpr,
            STAGES: gl.constexpr, HAS_H0: gl.constexpr):
    """Recurrence warpgroup W: value columns W * BW .. W * BW + BW - 1 of head i_h over one segment. S_w
    [K, BW] fp32 in the wgmma accumulator layout from the entering state to the segment's exit (written
    when it is the sequence's last segment), and the outputs o[:, cols] of every chunk. Each warpgroup
    forms the chunk's P itself (q k^T and the gates are the same in both, so this duplicates a 64x64x128
    product per chunk: the alternative, one warpgroup handing P to the other, would be a barrier between
    the two chains)."""
    gl.static_assert(BW == BT, "P [BT, BT] and the other chunk tiles share the [64, 64] accumulator layout")
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BW, 16])
    row_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    col_l: gl.constexpr = gl.SliceLayout(0, acc_l)
    p_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)  # P as P @ vd's A
    hs = hs_all.index(W)
    xs = xs_all.index(W)
    vd_t = vd_all.index(W)
    o_k = gl.arange(0, K, layout=row_l)
    o_v = W * BW + gl.arange(0, BW, layout=col_l)
    if j == 0:
        b_h = gl.zeros([K, BW], gl.float32, acc_l)
        if HAS_H0:
            b_h = gl.load(h0_ptr + ((seq * HV + i_h) * K + o_k[:, None]).to(gl.int64) * V + o_v[None, :])
    else:  # the chain left the state entering segment i_s in the C slot of segment i_s - 1
        p_mc = mc_ptr + ((gl.program_id(1) - 1) * HV + i_h).to(gl.int64) * K * (K + V)
        b_h = gl.load(p_mc + o_k[:, None] * (K + V) + K + o_v[None, :])
    b_zero = gl.zeros([BT, BW], gl.float32, acc_l)
    b_gn = _ws_gate_loads(g_ptr, t_first, t_stop, i_h, HV, BT)
    for c in range(n_ch):
        slot = c % STAGES
        t0 = t_first + c * BT
        b_g = b_gn
        b_gn = _ws_gate_loads(g_ptr, t0 + BT, t_stop, i_h, HV, BT)
        b_gam, b_gl, b_gv, m_r = _ws_gates(b_g, t0, t_stop, BT, row_l)
        # n = floor(gl - gam) and f = (gl - gam) - n, what the prep stored for the Triton forward. n is
        # computed once, on g's layout, and moved to the rows (f, vdk) and later the columns (P): gl - gam
        # is 0 on a chunk's last row and on rows >= L, where a floor computed twice (the compiler may fuse
        # gl - c * log2(e) into one FMA on one layout and not on another) gave n = 0 on one side and -1 on
        # the other: P @ vd off by 2x on those columns (H100, 2026-12-06: o rel L2 0.74 at E1, state exact)
        b_nv = gl.floor(b_gl - b_gv)
        b_n = gl.convert_layout(b_nv, row_l)
        b_f = (b_gl - b_gam) - b_n
        mbarrier.wait(ld_ready.index(slot), (c // STAGES) & 1)
        k_c = k_s.index(slot)
        q_c = q_s.index(slot)
        hs.store(b_h.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        u_tok = warpgroup_mma(k_c, hs, b_zero, use_acc=False, is_async=True)
        o_tok = warpgroup_mma(q_c, hs, b_zero, use_acc=False, is_async=True)
        b_v = v_s.index(slot).slice(W * BW, BW, dim=1).load(acc_l)
        b_u = warpgroup_mma_wait(num_outstanding=1, deps=(u_tok, ))  # groups retire in order: u is done, o not
        b_eg = gl.exp2(b_gam)
        b_x = gl.where(m_r[:, None], b_v.to(gl.float32) - b_u * b_eg[:, None], 0.0)
        xs.store(b_x.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        vn_tok = warpgroup_mma(tb_s.index(slot), xs, b_zero, use_acc=False, is_async=True)
        # q k^T after vn (vn is on the serial chain, qk not): it runs while vd and vdk are formed
        qk_tok = warpgroup_mma(q_c, k_c.permute((1, 0)), b_zero, use_acc=False, is_async=True)
        b_o, b_vn = warpgroup_mma_wait(num_outstanding=1, deps=(o_tok, vn_tok))  # o and vn done, qk not
        b_vd = gl.where(m_r[:, None], b_vn * gl.exp2(b_f)[:, None], 0.0).to(gl.bfloat16)
        vd_t.store(b_vd)
        # vdk: the integer part n of gl - gam that f leaves, on V~ instead of k; into xs (the Tb product
        # that read x is retired)
        xs.store((b_vd.to(gl.float32) * gl.exp2(b_n)[:, None]).to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        h_tok = warpgroup_mma(k_c.permute((1, 0)), xs, b_h * gl.exp2(b_gl), is_async=True)
        b_qk = warpgroup_mma_wait(num_outstanding=1, deps=(qk_tok, ))  # qk done, the state update not
        # P = scale (q k^T) 2^(gam_i - gl + n_j) = scale (q k^T) 2^(gam_i - gam_j - f_j) on j <= i, the prep's
        # P; where, not a product with 0: above the diagonal the power may be inf. Registers (ptxas sm_90,
        # Triton 3.6, 240 a warpgroup): the column scales n_j (16 a thread) are moved onto the columns here,
        # not at the chunk's start, and the mask compares t0 + j with t0 + i so that the 16 column indices
        # are not hoisted out of the loop; either one kept the other way spilled (8 to 40 bytes)
        causal = (t0 + gl.arange(0, BT, layout=col_l))[None, :] <= (t0 + gl.arange(0, BT, layout=row_l))[:, None]
        b_nc = gl.convert_layout(b_nv, col_l)
        b_p = gl.where(causal, b_qk * gl.exp2((b_gam - b_gl)[:, None] + b_nc[None, :]) * scale, 0.0)
        p_op = gl.convert_layout(b_p.to(gl.bfloat16), p_l)
        o_tok = warpgroup_mma(p_op, vd_t, b_o * (b_eg * scale)[:, None], is_async=True)
        # p_op is read from registers by the product in flight: kept alive through the wait
        b_h, b_o, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(h_tok, o_tok, p_op))
        mbarrier.arrive(ld_empty.index(slot), count=1)
        o_r = (t0 + gl.arange(0, BT, layout=row_l)).to(gl.int64) * (HV * V) + i_h * V
        gl.store(o_ptr + (o_r[:, None] + o_v[None, :]), b_o.to(gl.bfloat16), mask=m_r[:, None])
    if j == nseg - 1:
        p_ht = ht_ptr + ((seq * HV + i_h) * K + o_k[:, None]).to(gl.int64) * V + o_v[None, :]
        gl.store(p_ht, b_h)


@gluon.jit
def _fwd_ws_kernel(
    q_desc, k_desc, v_desc, tb_desc, g_ptr, o_ptr, h0_ptr, ht_ptr, mc_ptr, cu_ptr, cus_ptr,
    N, SEG, scale, HV: gl.constexpr, HK: gl.constexpr, K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr,
    LOG_N: gl.constexpr, HAS_H0: gl.constexpr, STAGES: gl.constexpr,
    REGS: gl.constexpr, REGS_LOAD: gl.constexpr,
):
    """o [T, HV, V] bf16 and the final states [N, HV, K, V] fp32 from q, k, v and Tb (TMA descriptors
    over their [T, heads * width] views), g [T, HV] fp32 and the entering states (h0 [N, HV, K, V], or the
    C slots of [M | C] [segments, HV, K, K + V]): _fwd_kernel's results (P and f formed here)."""
    gl.static_assert(K == 128, "the recurrence's wgmma tiles assume K = 128")
    gl.static_assert(V == 128, "two warpgroups of 64 value columns")
    gl.static_assert(BT == 64, "one wgmma M tile (4 warps x 16 rows) a chunk")
    BW: gl.constexpr = V // 2
    i_h = gl.program_id(0)
    seq, j, nseg, bos, L, t_beg, n_ch = _ws_segment(cu_ptr, cus_ptr, N, SEG, LOG_N, BT)
    if seq >= N:
        return  # surplus program: before any shared memory or barrier exists
    i_hk = i_h // (HV // HK)

    qk_l: gl.constexpr = k_desc.layout
    v_l: gl.constexpr = v_desc.layout
    tb_l: gl.constexpr = tb_desc.layout
    h_l: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, K], qk_l)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, K], qk_l)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, V], v_l)
    tb_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, BT], tb_l)
    hs_s = gl.allocate_shared_memory(gl.bfloat16, [2, K, BW], h_l)
    xs_s = gl.allocate_shared_memory(gl.bfloat16, [2, BT, BW], h_l)
    vd_s = gl.allocate_shared_memory(gl.bfloat16, [2, BT, BW], h_l)
    bar_l: gl.constexpr = mbarrier.MBarrierLayout()
    ld_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_l)
    ld_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_l)
    for i in gl.static_range(STAGES):
        mbarrier.init(ld_ready.index(i), count=1)
        mbarrier.init(ld_empty.index(i), count=2)  # one arrival per recurrence warpgroup
    fence_async_shared()  # the inits visible to the async proxy (TMA) before the first use

    t_first = bos + t_beg
    t_stop = bos + L
    gl.warp_specialize([
        (_ws_rec, (0, k_s, q_s, v_s, tb_s, hs_s, xs_s, vd_s, ld_ready, ld_empty,
                   g_ptr, o_ptr, h0_ptr, ht_ptr, mc_ptr, i_h, seq, j, nseg, t_first, t_stop, n_ch, scale,
                   HV, K, V, BT, BW, STAGES, HAS_H0)),
        (_ws_rec, (1, k_s, q_s, v_s, tb_s, hs_s, xs_s, vd_s, ld_ready, ld_empty,
                   g_ptr, o_ptr, h0_ptr, ht_ptr, mc_ptr, i_h, seq, j, nseg, t_first, t_stop, n_ch, scale,
                   HV, K, V, BT, BW, STAGES, HAS_H0)),
        (_ws_loader, (q_desc, k_desc, v_desc, tb_desc, q_s, k_s, v_s, tb_s, ld_ready, ld_empty,
                      t_first, i_hk * K, i_h * V, i_h * BT, n_ch, BT, STAGES)),
    ], [4, 1], [REGS, REGS_LOAD])


# Every TMA box here has rows of >= 128 bytes: 128-byte swizzle (the in-kernel hs/xs/vd tiles match). Built
# once: constructing a Gluon layout object validates its fields, four times a call was ~15% of the Gluon
# path's host time (cProfile on the device host, 2026-12-06).
_WS_SMEM = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)


def _ws_smem_layout():
    """The descriptors' shared-memory layout (scripts/device/gdn_ws_compile.py builds its signature with it)."""
    return _WS_SMEM


def _ws_desc(x, width):
    """TMA descriptor over x [T, heads, width] viewed as [T, heads * width], box [BT, width] (one head's
    rows of a chunk). Built per call (a Python object, a few us): a cache would have to hold its base
    tensor, and Tb is a fresh temporary every call, so it would keep the previous call's alive."""
    flat = x.view(x.shape[0], x.shape[1] * width)
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [BT, width], _WS_SMEM)


_WS_LAUNCH = _Launch(_fwd_ws_kernel)
# setmaxnreg of the second recurrence warpgroup and of the loader warp's warpgroup; the first recurrence
# warpgroup (Triton's default partition) gets what Triton 3.6 gives it: 128 * (240 + 240 + 24) of the
# 65536 registers, no spill (scripts/device/gdn_ws_compile.py). Ring slots: 2 of 56 KB (3 would need 232
# KB of the 227 KB of shared memory).
_WS_REGS = 240
_WS_REGS_LOAD = 24
_WS_STAGES = 2


def _fwd_ws(q, k, v, g, tb, pbuf, fdec, o, h0, ht, mc, cu, cus, N, seg, nseg_bound, scale, log_n, has_h0, cfg,
            key=None):
    """_fwd_ws_kernel over every segment: q, k [T, HK, K] bf16; v [T, HV, V] bf16; g [T, HV] fp32; Tb
    [T, HV, BT] bf16; h0 [N, HV, K, V] fp32 (any tensor when has_h0 is False); [M | C] [segments, HV, K, K + V]
    fp32 (any tensor without CP) -> o [T, HV, V] bf16 and the final states ht [N, HV, K, V] fp32, written in
    place (what _fwd writes). pbuf and fdec (P and f, _fwd's signature) are not read: the kernel forms P and
    f itself and the prep skips them for "ws" (the entry passes bf16 and fp32 dummies); only T == 0 hands
    them to _fwd, which then has no chunk and reads neither. key: the entry's launch key, ignored here (the
    descriptors are keyed per launch, common._launch_key).

    The segments are the ones the CP policy sized with BV = 64 columns a program: two 64-column chains per
    CTA, the program count it assumed. All tensors contiguous."""
    T, HK, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    if T == 0:  # no chunk to load (a TMA box needs rows): only final states, which _fwd writes (no chunk,
        # so it never reads pbuf or fdec)
        _fwd(q, k, v, g, tb, pbuf, fdec, o, h0, ht, mc, cu, cus, N, seg, nseg_bound, scale, log_n, has_h0, cfg,
             key)
        return
    descs = (_ws_desc(q, K), _ws_desc(k, K), _ws_desc(v, V), _ws_desc(tb, BT))
    args = (*descs, g, o, h0, ht, mc, cu, cus, N, seg, scale)
    kw = dict(HV=HV, HK=HK, K=K, V=V, BT=BT, LOG_N=log_n, HAS_H0=has_h0, STAGES=_WS_STAGES,
              REGS=_WS_REGS, REGS_LOAD=_WS_REGS_LOAD, num_warps=4)
    _WS_LAUNCH((HV, nseg_bound), args, kw)  # keyed per argument: the descriptors are built per call
