"""Stage 3 in Gluon for Hopper (sm_90a), chosen by CONFIG["fwd"] "ws" (and by "auto", the default, where it
runs): the forward of fwd.py (_fwd_kernel's maths, inputs and outputs) warp-specialised as FlashQLA's fused
forward splits it (chunk/hopper/fused_fwd.py: state, V and O warpgroups): the serial chain alone on the
recurrence warpgroups, the outputs on a warpgroup of their own.

One CTA per (value head i_h, segment i_s), grid (HV, segments): the CTA owns all V = 128 value columns
of the head's state, split in two halves of BW = 64 columns. Split (BW = 32, cp._cp_policy's split rule):
two CTAs a head, grid (2 HV, 1), each owning 64 columns cv .. cv + 63 in two halves of 32; FlashQLA takes
64-column CTAs where the heads leave SMs idle (block_DV 64 at G8). The recurrence is independent per value
column (S[:, cols] needs only k, v[:, cols], Tb and g), so each half runs in its own warpgroup: two serial
chains share an SM and hide each other's latency. Per chunk of BT = 64 tokens, from the state half
S_w [K, BW] fp32 (gam = chunk-local cumsum of g and gl = sum g, both in log2 units; rows >= L read
g = 0, so gam is flat there):
    x   = v[:, cols] - (k @ hs_w) 2^gam           hs_w = bf16(S_w); rows >= L zeroed
    V~  = Tb @ bf16(x)                            fp32; rows >= L zeroed (Tb's rows there are the next sequence's)
    S_w = S_w 2^gl + k^T @ bf16(V~ 2^(gl - gam))   the exponent is <= 0
and, on the output warpgroup, for both halves (vd_w = bf16(V~), rounded once from fp32 like the update's
operand: FlashQLA's order, errors as fla's):
    P   = bf16(scale (q @ k^T) 2^(gam_i - gam_j)) on j <= i, else 0 (where: above the diagonal the power may be inf)
    o_w = scale 2^gam (q @ hs_w) + P @ vd_w         rows >= L never stored
Triton's forward (fwd.py) splits gl - gam into an integer and a fraction so that one V~ tile serves both
products; here each product has its own tile, so no floor is taken: the two paths agree to bf16 rounding,
not bit for bit (tests/evaluate/test_gpu_kernel_paths.py compares both with float64).

Partitions (gl.warp_specialize; 13 warps, launched as 16: setmaxnreg works per warpgroup):
  default, 4 warps  recurrence warpgroup 0 (columns 0..63): S_0 in registers for the whole segment;
                    per chunk u = k hs, x, V~ = Tb x, the update: three products, each waited for at once.
  worker 0, 4 warps recurrence warpgroup 1 (columns 64..127), the same function with W = 1.
  worker 1, 4 warps the output warpgroup: q k^T and P as soon as the chunk is loaded, q hs_w once hs_w is
                    published, P vd_w once vd_w is; o leaves through shared memory by TMA (plain
                    masked stores on a sequence's last, partial chunk).
  worker 2, 1 warp  the TMA loader: per chunk k, v (the head's 128 columns), Tb, q into a ring of
                    STAGES slots.

Shared memory (STAGES = 2; all tiles NVMMA swizzled, 128 bytes, 64 for the [*, 32] tiles of the split; what
TMA writes and wgmma reads), at BW = 64: ring 2 x (k 16 + q 16 + v 2 x 8 + Tb 8 KB) = 112 KB; per recurrence
warpgroup hs [K, BW] 16 KB, xs [BT, BW] 8 KB (bf16(x), then the update's operand once the Tb product that
read x is complete), vd [BT, BW] 8 KB; o [BT, 2 BW] 16 KB for the output warpgroup's TMA stores: 192 KB of
227 (plus the layout conversions' scratch, gdn_ws_compile.py prints the total: 193.0 KB; 137.0 KB at BW = 32).

Barriers (mbarrier, shared memory). An arrival is one per partition (Triton predicates it on the
partition's first thread), so a count is the number of partitions that arrive per phase. Chunk c of
the segment uses ring slot c % STAGES; n_use = c // STAGES counts that slot's uses.
  ld_ready[s]  count 1: the loader's expect-tx arrival, completed by the TMA bytes of the chunk's boxes
               (k, v as two, Tb, q: 56 KB; 48 KB at BW = 32). The three consumers wait parity n_use & 1.
  ld_empty[s]  count 3: each consumer arrives once per use, after the wgmma wait that retires its last
               products of the chunk. The loader waits parity (n_use & 1) ^ 1: a fresh barrier's previous
               phase counts as complete, so the first pass over the ring does not block.
  hs_ready[w], vd_ready[w]  count 1: recurrence warpgroup w published hs_w / vd_w of chunk c (its generic
               stores fenced for the async proxy and a warpgroup barrier before the arrival); the output
               warpgroup waits parity c & 1.
  hs_free[w], vd_free[w]    count 1: the output warpgroup retired its products that read hs_w / vd_w of
               chunk c; recurrence warpgroup w waits parity (c & 1) ^ 1 before it overwrites them in
               chunk c + 1 (chunk 0 passes, as on the ring).
No barrier can run two phases ahead of its waiter: each side's next arrival needs the other's wait of
the previous phase. The recurrence warpgroups never wait on each other, only on the loader and on the
output warpgroup's previous chunk, whose products (q hs, then P vd) are issued as soon as their tiles are
published. Every partition loops over the same n_ch chunks, so a segment of 0 chunks (an empty sequence)
touches no barrier: each recurrence warpgroup writes its half of the final state (h0 or zeros) and every
partition exits.

Rows >= L of the last chunk: TMA reads the next sequence's rows there (zeros past T), so x and V~ are
zeroed on those rows with where (their products then add nothing to S and o) and that chunk's o
stores are plain masked ones; P's columns j >= L meet those zero vd rows. g is a plain masked load,
issued a chunk ahead.
Registers (setmaxnreg): the second recurrence warpgroup _WS_REGS, the output warpgroup _WS_REGS_OUT, the
loader's warpgroup _WS_REGS_LOAD; Triton 3.6 gives the default partition what is left of the 64K
(scripts/device/gdn_ws_compile.py prints the values and the spills).
Requires sm_90a and Triton's Gluon (3.6 on the device): Triton's interpreter cannot run it, so the
CPU path keeps fwd.py's kernel (CONFIG["fwd"] = "triton").
Measured: see docs/perf/gdn_prefill.md. The structure before this one (two recurrence warpgroups that each
also formed P and their o half, 240 registers each) ran 1.04-1.10x the Triton forward on all ten full
shapes (H100, graph replay, 2026-12-06); one recurrence warpgroup of 128 columns a CTA had lost everywhere
(0.68-0.98x the Triton forward): one serial chain an SM, barrier stalls 40%.
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
    """gam = cumsum(g) and gl = sum(g) in log2 units: gam on the accumulator rows and on g's own layout (the
    output warpgroup moves P's column gates from there onto the columns), gl, and the rows' validity."""
    b_gam = gl.associative_scan(b_g, 0, _ws_add) * LOG2E
    b_gl = gl.sum(b_g, 0) * LOG2E
    m_r = (t0 + gl.arange(0, BT, layout=row_l)) < t_stop
    return gl.convert_layout(b_gam, row_l), b_gl, b_gam, m_r


@gluon.jit
def _ws_loader(q_desc, k_desc, v_desc, tb_desc, q_s, k_s, v_s, tb_s, ld_ready, ld_empty,
               row0, col_qk, col_v, col_tb, n_ch, BT: gl.constexpr, BW: gl.constexpr, STAGES: gl.constexpr):
    """TMA of chunk c's tiles into slot c % STAGES (v as one [BT, BW] box a recurrence warpgroup, v_s index
    2 slot + w), once the three consumers released its last use."""
    nbytes: gl.constexpr = (q_desc.block_type.nbytes + k_desc.block_type.nbytes + 2 * v_desc.block_type.nbytes
                            + tb_desc.block_type.nbytes)
    for c in range(n_ch):
        slot = c % STAGES
        mbarrier.wait(ld_empty.index(slot), ((c // STAGES) & 1) ^ 1)
        bar = ld_ready.index(slot)
        mbarrier.expect(bar, nbytes)
        row = row0 + c * BT
        # the recurrence's operands first: u = k hs, then x needs v, then Tb; q (the output warpgroup's) last
        tma.async_copy_global_to_shared(k_desc, [row, col_qk], bar, k_s.index(slot))
        tma.async_copy_global_to_shared(v_desc, [row, col_v], bar, v_s.index(2 * slot))
        tma.async_copy_global_to_shared(v_desc, [row, col_v + BW], bar, v_s.index(2 * slot + 1))
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
def _ws_rec(W: gl.constexpr, k_s, v_s, tb_s, hs_all, xs_all, vd_all, ld_ready, ld_empty,
            hs_ready, hs_free, vd_ready, vd_free,
            g_ptr, h0_ptr, ht_ptr, mc_ptr, i_h, cv, seq, j, nseg, t_first, t_stop, n_ch,
            HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr, BW: gl.constexpr,
            STAGES: gl.constexpr, HAS_H0: gl.constexpr):
    """Recurrence warpgroup W: value columns cv + W * BW .. cv + W * BW + BW - 1 of head i_h over one segment. S_w
    [K, BW] fp32 in the wgmma accumulator layout from the entering state to the segment's exit (written
    when it is the sequence's last segment). Per chunk it publishes hs = bf16(S_w) and vd = bf16(V~_w) to the
    output warpgroup (hs_ready, vd_ready) and overwrites them only once that warpgroup has retired its
    products of the previous chunk (hs_free, vd_free): the serial chain itself is three products."""
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BW, 16])
    row_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    col_l: gl.constexpr = gl.SliceLayout(0, acc_l)
    hs = hs_all.index(W)
    xs = xs_all.index(W)
    vd_t = vd_all.index(W)
    o_k = gl.arange(0, K, layout=row_l)
    o_v = cv + W * BW + gl.arange(0, BW, layout=col_l)
    if j == 0:
        b_h = gl.zeros([K, BW], gl.float32, acc_l)
        if HAS_H0:
            b_h = gl.load(h0_ptr + ((seq * HV + i_h) * K + o_k[:, None]).to(gl.int64) * V + o_v[None, :])
    else:  # the chain left the state entering segment i_s in the C slot of segment i_s - 1
        p_mc = mc_ptr + ((gl.program_id(1) - 1) * HV + i_h).to(gl.int64) * K * (K + V)
        b_h = gl.load(p_mc + o_k[:, None] * (K + V) + K + o_v[None, :])
    b_zero = gl.zeros([BT, BW], gl.float32, acc_l)
    # chunk c's gates are formed during chunk c - 1's update (the scan crosses warps: a warpgroup barrier,
    # now off the serial chain), its g loaded a chunk before that: 1.004-1.019x on G1-G8 (H100, graph
    # replay, one call, 2026-12-06), for 8 more bytes of stack
    b_gam, b_gl, b_gv, m_r = _ws_gates(_ws_gate_loads(g_ptr, t_first, t_stop, i_h, HV, BT), t_first, t_stop,
                                       BT, row_l)
    b_gn = _ws_gate_loads(g_ptr, t_first + BT, t_stop, i_h, HV, BT)
    for c in range(n_ch):
        slot = c % STAGES
        t0 = t_first + c * BT
        mbarrier.wait(ld_ready.index(slot), (c // STAGES) & 1)
        k_c = k_s.index(slot)
        # a fresh barrier's previous phase counts as complete: chunk 0 does not wait
        mbarrier.wait(hs_free.index(W), (c & 1) ^ 1)
        hs.store(b_h.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(hs_ready.index(W), count=1)
        u_tok = warpgroup_mma(k_c, hs, b_zero, use_acc=False, is_async=True)
        b_v = v_s.index(2 * slot + W).load(acc_l)
        b_u = warpgroup_mma_wait(num_outstanding=0, deps=(u_tok, ))
        b_x = gl.where(m_r[:, None], b_v.to(gl.float32) - b_u * gl.exp2(b_gam)[:, None], 0.0)
        xs.store(b_x.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        vn_tok = warpgroup_mma(tb_s.index(slot), xs, b_zero, use_acc=False, is_async=True)
        b_vn = warpgroup_mma_wait(num_outstanding=0, deps=(vn_tok, ))
        # V~ = Tb x on the valid rows (Tb's rows >= L are the next sequence's); each use rounds it once from
        # fp32 (FlashQLA's order): vd for P @ vd, vdk = V~ 2^(gl - gam) (exponent <= 0) for the update
        b_vn = gl.where(m_r[:, None], b_vn, 0.0)
        mbarrier.wait(vd_free.index(W), (c & 1) ^ 1)
        vd_t.store(b_vn.to(gl.bfloat16))
        xs.store((b_vn * gl.exp2(b_gl - b_gam)[:, None]).to(gl.bfloat16))  # the Tb product that read x is retired
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(vd_ready.index(W), count=1)
        h_tok = warpgroup_mma(k_c.permute((1, 0)), xs, b_h * gl.exp2(b_gl), is_async=True)
        b_gam, b_gl, b_gv, m_r = _ws_gates(b_gn, t0 + BT, t_stop, BT, row_l)
        b_gn = _ws_gate_loads(g_ptr, t0 + 2 * BT, t_stop, i_h, HV, BT)
        b_h = warpgroup_mma_wait(num_outstanding=0, deps=(h_tok, ))
        mbarrier.arrive(ld_empty.index(slot), count=1)
    if j == nseg - 1:
        p_ht = ht_ptr + ((seq * HV + i_h) * K + o_k[:, None]).to(gl.int64) * V + o_v[None, :]
        gl.store(p_ht, b_h)


@gluon.jit
def _ws_out(q_s, k_s, hs_all, vd_all, o_s, ld_ready, ld_empty, hs_ready, hs_free, vd_ready, vd_free,
            o_desc, g_ptr, o_ptr, i_h, cv, t_first, t_stop, n_ch, scale,
            HV: gl.constexpr, V: gl.constexpr, BT: gl.constexpr, BW: gl.constexpr, STAGES: gl.constexpr):
    """The output warpgroup: o [BT, V] of every chunk, off the serial chains. q k^T and P as soon as the ring
    slot is loaded, then o_w = scale 2^gam (q @ hs_w) + P @ vd_w for both column halves w once the two
    recurrence warpgroups published hs_w and vd_w. P = scale (q k^T) 2^(gam_i - gam_j) on j <= i (exponent
    <= 0), else 0 (where, never a product with 0: above the diagonal the power may be inf).

    o leaves through shared memory and TMA (o_s, two [BT, BW] halves) on every chunk that lies inside its
    sequence, and with masked plain stores on a sequence's last, partial chunk (a TMA box would write the
    next sequence's rows). The plain stores of the accumulator layout (16 bytes a row a warp instruction)
    held this warpgroup, and through hs_free / vd_free the recurrence: leaving them out took G5 from 209.4
    to 166.1 us; through TMA, G5 208.1 -> 186.6 us and 1.06-1.11x on all ten full shapes (H100, graph
    replay, one process, 2026-12-06)."""
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BT, 16])
    row_l: gl.constexpr = gl.SliceLayout(1, acc_l)  # q k^T and P [BT, BT]
    col_l: gl.constexpr = gl.SliceLayout(0, acc_l)
    acc_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BW, 16])
    row_o: gl.constexpr = gl.SliceLayout(1, acc_o)  # the o halves [BT, BW] (acc_l itself when BW == BT)
    p_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_o, k_width=2)  # P as P @ vd's A
    o_v = cv + gl.arange(0, BW, layout=gl.SliceLayout(0, acc_o))
    b_zero = gl.zeros([BT, BT], gl.float32, acc_l)
    b_zero_o = gl.zeros([BT, BW], gl.float32, acc_o)
    b_gn = _ws_gate_loads(g_ptr, t_first, t_stop, i_h, HV, BT)
    for c in range(n_ch):
        slot = c % STAGES
        t0 = t_first + c * BT
        b_g = b_gn
        b_gn = _ws_gate_loads(g_ptr, t0 + BT, t_stop, i_h, HV, BT)
        b_gam, b_gl, b_gv, _ = _ws_gates(b_g, t0, t_stop, BT, row_l)  # rows past the end: the stores mask them
        mbarrier.wait(ld_ready.index(slot), (c // STAGES) & 1)
        q_c = q_s.index(slot)
        qk_tok = warpgroup_mma(q_c, k_s.index(slot).permute((1, 0)), b_zero, use_acc=False, is_async=True)
        mbarrier.wait(hs_ready.index(0), c & 1)
        o0_tok = warpgroup_mma(q_c, hs_all.index(0), b_zero_o, use_acc=False, is_async=True)
        mbarrier.wait(hs_ready.index(1), c & 1)
        o1_tok = warpgroup_mma(q_c, hs_all.index(1), b_zero_o, use_acc=False, is_async=True)
        b_qk = warpgroup_mma_wait(num_outstanding=2, deps=(qk_tok, ))  # groups retire in order: qk, o0, o1
        causal = (t0 + gl.arange(0, BT, layout=col_l))[None, :] <= (t0 + gl.arange(0, BT, layout=row_l))[:, None]
        b_gc = gl.convert_layout(b_gv, col_l)
        b_p = gl.where(causal, b_qk * gl.exp2(b_gam[:, None] - b_gc[None, :]) * scale, 0.0)
        p_op = gl.convert_layout(b_p.to(gl.bfloat16), p_l)
        b_o0, b_o1 = warpgroup_mma_wait(num_outstanding=0, deps=(o0_tok, o1_tok))
        mbarrier.arrive(hs_free.index(0), count=1)
        mbarrier.arrive(hs_free.index(1), count=1)
        b_eg = gl.convert_layout(gl.exp2(b_gam) * scale, row_o)
        mbarrier.wait(vd_ready.index(0), c & 1)
        o0_tok = warpgroup_mma(p_op, vd_all.index(0), b_o0 * b_eg[:, None], is_async=True)
        mbarrier.wait(vd_ready.index(1), c & 1)
        o1_tok = warpgroup_mma(p_op, vd_all.index(1), b_o1 * b_eg[:, None], is_async=True)
        # p_op is read from registers by the products in flight: kept alive through the wait
        b_o0, b_o1, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(o0_tok, o1_tok, p_op))
        mbarrier.arrive(vd_free.index(0), count=1)
        mbarrier.arrive(vd_free.index(1), count=1)
        mbarrier.arrive(ld_empty.index(slot), count=1)
        if t0 + BT <= t_stop:
            tma.store_wait(0)  # the previous chunk's stores have read o_s
            gl.thread_barrier()  # (only the issuing thread waits on the store group)
            o_s.index(0).store(b_o0.to(gl.bfloat16))
            o_s.index(1).store(b_o1.to(gl.bfloat16))
            fence_async_shared()
            gl.thread_barrier()
            tma.async_copy_shared_to_global(o_desc, [t0, i_h * V + cv], o_s.index(0))
            tma.async_copy_shared_to_global(o_desc, [t0, i_h * V + cv + BW], o_s.index(1))
        else:
            o_t = t0 + gl.arange(0, BT, layout=row_o)
            m_o = (o_t < t_stop)[:, None]
            o_r = o_t.to(gl.int64) * (HV * V) + i_h * V
            gl.store(o_ptr + (o_r[:, None] + o_v[None, :]), b_o0.to(gl.bfloat16), mask=m_o)
            gl.store(o_ptr + (o_r[:, None] + (BW + o_v)[None, :]), b_o1.to(gl.bfloat16), mask=m_o)
    tma.store_wait(0)


@gluon.jit
def _fwd_ws_kernel(
    q_desc, k_desc, v_desc, tb_desc, o_desc, g_ptr, o_ptr, h0_ptr, ht_ptr, mc_ptr, cu_ptr, cus_ptr,
    N, SEG, scale, HV: gl.constexpr, HK: gl.constexpr, K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr,
    LOG_N: gl.constexpr, HAS_H0: gl.constexpr, STAGES: gl.constexpr, BW: gl.constexpr,
    REGS: gl.constexpr, REGS_OUT: gl.constexpr, REGS_LOAD: gl.constexpr,
):
    """o [T, HV, V] bf16 and the final states [N, HV, K, V] fp32 from q, k, v and Tb (TMA descriptors
    over their [T, heads * width] views), g [T, HV] fp32 and the entering states (h0 [N, HV, K, V], or the
    C slots of [M | C] [segments, HV, K, K + V]): _fwd_kernel's results (P formed here)."""
    gl.static_assert(K == 128, "the recurrence's wgmma tiles assume K = 128")
    gl.static_assert(V == 128, "the value columns split in halves or quarters of 64 or 32")
    gl.static_assert(BT == 64, "one wgmma M tile (4 warps x 16 rows) a chunk")
    gl.static_assert((BW == 64) or (BW == 32), "a recurrence warpgroup's columns: a CTA owns 2 BW of them")
    NVB: gl.constexpr = V // (2 * BW)  # CTAs a head
    i_h = gl.program_id(0) // NVB
    cv = (gl.program_id(0) % NVB) * (2 * BW)  # the CTA's first value column
    seq, j, nseg, bos, L, t_beg, n_ch = _ws_segment(cu_ptr, cus_ptr, N, SEG, LOG_N, BT)
    if seq >= N:
        return  # surplus program: before any shared memory or barrier exists
    i_hk = i_h // (HV // HK)

    qk_l: gl.constexpr = k_desc.layout
    v_l: gl.constexpr = v_desc.layout
    tb_l: gl.constexpr = tb_desc.layout
    h_l: gl.constexpr = v_desc.layout  # every [*, BW] bf16 tile: the host picks its swizzle from the width
    k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, K], qk_l)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, K], qk_l)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [2 * STAGES, BT, BW], v_l)
    tb_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, BT], tb_l)
    hs_s = gl.allocate_shared_memory(gl.bfloat16, [2, K, BW], h_l)
    xs_s = gl.allocate_shared_memory(gl.bfloat16, [2, BT, BW], h_l)
    vd_s = gl.allocate_shared_memory(gl.bfloat16, [2, BT, BW], h_l)
    o_s = gl.allocate_shared_memory(gl.bfloat16, [2, BT, BW], o_desc.layout)
    bar_l: gl.constexpr = mbarrier.MBarrierLayout()
    ld_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_l)
    ld_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_l)
    hs_ready = gl.allocate_shared_memory(gl.int64, [2, 1], bar_l)
    hs_free = gl.allocate_shared_memory(gl.int64, [2, 1], bar_l)
    vd_ready = gl.allocate_shared_memory(gl.int64, [2, 1], bar_l)
    vd_free = gl.allocate_shared_memory(gl.int64, [2, 1], bar_l)
    for i in gl.static_range(STAGES):
        mbarrier.init(ld_ready.index(i), count=1)
        mbarrier.init(ld_empty.index(i), count=3)  # the two recurrence warpgroups and the output one
    for i in gl.static_range(2):
        mbarrier.init(hs_ready.index(i), count=1)
        mbarrier.init(hs_free.index(i), count=1)
        mbarrier.init(vd_ready.index(i), count=1)
        mbarrier.init(vd_free.index(i), count=1)
    fence_async_shared()  # the inits visible to the async proxy (TMA) before the first use

    t_first = bos + t_beg
    t_stop = bos + L
    gl.warp_specialize([
        (_ws_rec, (0, k_s, v_s, tb_s, hs_s, xs_s, vd_s, ld_ready, ld_empty, hs_ready, hs_free, vd_ready, vd_free,
                   g_ptr, h0_ptr, ht_ptr, mc_ptr, i_h, cv, seq, j, nseg, t_first, t_stop, n_ch,
                   HV, K, V, BT, BW, STAGES, HAS_H0)),
        (_ws_rec, (1, k_s, v_s, tb_s, hs_s, xs_s, vd_s, ld_ready, ld_empty, hs_ready, hs_free, vd_ready, vd_free,
                   g_ptr, h0_ptr, ht_ptr, mc_ptr, i_h, cv, seq, j, nseg, t_first, t_stop, n_ch,
                   HV, K, V, BT, BW, STAGES, HAS_H0)),
        (_ws_out, (q_s, k_s, hs_s, vd_s, o_s, ld_ready, ld_empty, hs_ready, hs_free, vd_ready, vd_free,
                   o_desc, g_ptr, o_ptr, i_h, cv, t_first, t_stop, n_ch, scale, HV, V, BT, BW, STAGES)),
        (_ws_loader, (q_desc, k_desc, v_desc, tb_desc, q_s, k_s, v_s, tb_s, ld_ready, ld_empty,
                      t_first, i_hk * K, i_h * V + cv, i_h * BT, n_ch, BT, BW, STAGES)),
    ], [4, 4, 1], [REGS, REGS_OUT, REGS_LOAD])


# A TMA box's swizzle is its row's bytes up to 128 (bf16: 64 or more columns 128, 32 columns 64); the in-kernel
# [*, BW] tiles take v's. Built once: constructing a Gluon layout object validates its fields, four times a
# call was ~15% of the Gluon path's host time (cProfile on the device host, 2026-12-06).
_WS_SMEM = {w: gl.NVMMASharedLayout(swizzle_byte_width=min(128, 2 * w), element_bitwidth=16, rank=2)
            for w in (32, 64, 128)}


def _ws_smem_layout(cols=128):
    """The shared-memory layout of a [BT, cols] bf16 box (scripts/device/gdn_ws_compile.py builds its
    signature with it)."""
    return _WS_SMEM[cols]


def _ws_desc(x, width, box=None):
    """TMA descriptor over x [T, heads, width] viewed as [T, heads * width], box [BT, box or width] (one
    head's rows of a chunk, or box columns of them). Built per call (a Python object, a few us): a cache
    would have to hold its base tensor, and Tb and o are fresh every call, so it would keep the previous
    call's alive."""
    flat = x.view(x.shape[0], x.shape[1] * width)
    box = box or width
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [BT, box], _WS_SMEM[box])


class _WsDesc:
    """What Triton's launcher reads of a host TensorDescriptor (base, shape, strides, padding), without the
    dataclass's validation or the flat view: 0.5 against 3.4 us a descriptor on this project's CPU machine
    (five a call). Only for a launch whose key already went through the JIT with validated TensorDescriptors
    of the same geometry (_fwd_ws), so nothing here can be malformed that was not checked there."""

    padding = "zero"
    round_f32_to_tf32 = False

    def __init__(self, x, width, box=None):
        rows, cols = x.shape[0], x.shape[1] * width
        box = box or width
        self.base = x  # the launcher reads only its address
        self.shape = [rows, cols]
        self.strides = [cols, 1]
        self.block_shape = [BT, box]
        self.layout = _WS_SMEM[box]


_WS_LAUNCH = _Launch(_fwd_ws_kernel)
# setmaxnreg of the second recurrence warpgroup, the output warpgroup and the loader warp's warpgroup; the
# first recurrence warpgroup (Triton's default partition) gets what is left of 512 a thread: 168. Below 168
# the output warpgroup spills (160: 24 more bytes), the recurrence below 152 (144: 16 more); at these values
# ptxas reports 32 bytes of stack (16 before o went through TMA): a prologue index and a few scalars, a load
# or two a chunk (ptxas sm_90a, Triton 3.6, offline, scripts/device/gdn_ws_compile.py).
# Ring slots: 2 of 56 KB (3 would need 249 KB of the 227 KB of shared memory).
_WS_REGS = 152
_WS_REGS_OUT = 168
_WS_REGS_LOAD = 24
_WS_STAGES = {64: 2, 32: 2}  # ring slots by BW


def _fwd_ws(q, k, v, g, tb, pbuf, fdec, o, h0, ht, mc, cu, cus, N, seg, nseg_bound, scale, log_n, has_h0, cfg,
            key=None, split=False):
    """_fwd_ws_kernel over every segment: q, k [T, HK, K] bf16; v [T, HV, V] bf16; g [T, HV] fp32; Tb
    [T, HV, BT] bf16; h0 [N, HV, K, V] fp32 (any tensor when has_h0 is False); [M | C] [segments, HV, K, K + V]
    fp32 (any tensor without CP) -> o [T, HV, V] bf16 and the final states ht [N, HV, K, V] fp32, written in
    place (what _fwd writes). pbuf and fdec (P and f, _fwd's signature) are not read: the kernel forms P and
    f itself and the prep skips them for "ws" (the entry passes bf16 and fp32 dummies); only T == 0 hands
    them to _fwd, which then has no chunk and reads neither. key: the entry's launch key (_Launch), with T
    added here; None keys the launch per argument (aka.launch.launch_key). split: two CTAs a head, each with two
    32-column chains (cp._cp_policy's split rule), else one CTA a head with two 64-column chains.

    The segments are the ones the CP policy sized with BV = 64 columns a program: two 64-column chains per
    CTA, the program count it assumed. All tensors contiguous."""
    T, HK, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    if T == 0:  # no chunk to load (a TMA box needs rows): only final states, which _fwd writes (no chunk,
        # so it never reads pbuf or fdec)
        _fwd(q, k, v, g, tb, pbuf, fdec, o, h0, ht, mc, cu, cus, N, seg, nseg_bound, scale, log_n, has_h0, cfg,
             key)
        return
    # the entry's key holds everything the launch specialises on but the descriptors' row count (T, the one
    # size outside it); a key seen before took the JIT path with validated descriptors of this geometry
    key = None if key is None else (key, T, split)
    desc = _WsDesc if key is not None and _WS_LAUNCH.warm(key) else _ws_desc
    bw = 32 if split else 64  # each recurrence warpgroup's columns; a CTA owns two of them
    descs = (desc(q, K), desc(k, K), desc(v, V, bw), desc(tb, BT), desc(o, V, bw))
    args = (*descs, g, o, h0, ht, mc, cu, cus, N, seg, scale)
    kw = dict(HV=HV, HK=HK, K=K, V=V, BT=BT, LOG_N=log_n, HAS_H0=has_h0, STAGES=_WS_STAGES[bw], BW=bw,
              REGS=_WS_REGS, REGS_OUT=_WS_REGS_OUT, REGS_LOAD=_WS_REGS_LOAD, num_warps=4)
    _WS_LAUNCH((HV * (V // (2 * bw)), nseg_bound), args, kw, key)
