"""Stage 3 in Gluon for Hopper (sm_90a), chosen by CONFIG["fwd"] == "ws": the forward of fwd.py
(_fwd_kernel's maths, inputs and outputs) warp-specialised, so the TMA loads, the state recurrence and
the outputs of a segment run in three partitions of one CTA instead of one instruction stream.

One CTA per (value block i_v of BV columns, value head i_h, segment i_s), the grid of _fwd. Per chunk
of BT = 64 tokens, from the state S [K, BV] fp32 (gam = chunk-local cumsum of g and gl = sum g, both
in log2 units; rows >= L read g = f = 0):
    x  = v - (k @ bf16(S)) 2^gam            rows >= L zeroed
    vd = bf16((Tb @ bf16(x)) 2^f)           rows >= L zeroed
    o  = (q @ bf16(S)) 2^gam scale + P @ vd  rows >= L never stored
    S  = S 2^gl + k^T @ bf16(vd 2^e),  e = floor(gl - gam - f + 1/2)
The last form is _fwd_kernel's k^T-side scale moved onto vd: 2^e is a power of two, so bf16(k 2^e)^T vd
and k^T bf16(vd 2^e) are the same products (bar underflow far below the tolerances), and the k tile in
shared memory serves the update unmodified, as the transposed A operand of the wgmma.

Partitions (gl.warp_specialize; 9 warps, launched as 12: setmaxnreg works per warpgroup):
  default, 4 warps  the recurrence: holds S in registers (BV fp32 a thread) for the whole segment;
                    per chunk writes hs = bf16(S), then u = k hs, x, vn = Tb xs, vd and vdk, and the
                    state update, every product a wgmma from shared memory.
  worker 0, 4 warps the outputs: o = q hs (as soon as hs is published), row scale, o += P vd, masked
                    bf16 stores from the accumulator layout.
  worker 1, 1 warp  the TMA loader: per chunk k, v, Tb, q, P into a ring of STAGES slots.
The recurrence is the serial path; the outputs hang off it (they read hs and vd, never write what the
recurrence reads), so o of chunk c overlaps the recurrence of chunk c + 1.

Shared memory (BV = 128, STAGES = 2; all tiles NVMMA 128-byte swizzled, what TMA writes and wgmma reads):
ring 2 x (k 16 + q 16 + v 16 + Tb 8 + P 8 KB) = 128 KB; hs [K, BV] 32 KB; xs [BT, BV] 16 KB (bf16(x),
then vdk once the Tb product that read x is complete); vd [BT, BV] 16 KB: 192 KB of 227. BV = 64: 144 KB.

Barriers (mbarrier, shared memory). An arrival is one per partition (Triton predicates it on the
partition's first thread), so a count is the number of partitions that arrive per phase. Chunk c of
the segment uses ring slot c % STAGES; n_use = c // STAGES counts that slot's uses.
  ld_ready[s]  count 1: the loader's expect-tx arrival, completed by the TMA bytes of the five tiles.
               Waited by the recurrence and the outputs with parity n_use & 1.
  ld_empty[s]  count 2: the recurrence (after its state update, the last read of k, v, Tb) and the
               outputs (after P vd, the last read of q, P) each arrive once per use. The loader waits
               parity (n_use & 1) ^ 1: a fresh barrier's previous phase counts as complete, so the first
               pass over the ring does not block; later passes wait for both releases of the last use.
  hs_ready     count 1: the recurrence, once hs of chunk c is stored and fenced. Outputs wait c & 1.
  hs_free      count 1: the outputs, once q hs of chunk c is complete. The recurrence waits (c & 1) ^ 1
               before storing hs of chunk c (chunk 0 passes: fresh barrier), i.e. for chunk c - 1's release.
  vd_ready     count 1: the recurrence, once vd of chunk c is stored and fenced. Outputs wait c & 1.
  vd_free      count 1: the outputs, once P vd of chunk c is complete. The recurrence waits (c & 1) ^ 1
               before storing vd of chunk c.
No barrier can run two phases ahead of its waiter: each *_ready of chunk c + 1 is arrived only after
the matching *_free of chunk c was waited, which the outputs arrive only after waiting *_ready of c.
No cycle: the recurrence of chunk c waits only on loads (freed by releases of chunk c - STAGES) and
on the outputs' releases of chunk c - 1, which need only the recurrence's arrivals of chunk c - 1.
Every partition loops over the same n_ch chunks, so a segment of 0 chunks (an empty sequence) touches
no barrier: the recurrence writes its final state (h0 or zeros) and every partition exits.

Generic-proxy shared stores (hs, xs, vd) are followed by fence_async_shared (they feed wgmma, the async
proxy) and a warpgroup barrier (gl.thread_barrier: every warp has written before the single-thread
arrival or the MMA issue).
Rows >= L of the last chunk: TMA reads the next sequence's rows there (zeros past T), never zeros of
this sequence, so x and vd are zeroed on those rows with where (their products then add nothing to S
and o) and the o stores are masked; g and f are plain masked loads.
Registers (setmaxnreg; 168 a thread at launch for the 12 warps): recurrence 256 (Triton 3.6 sizes the
default partition from what the workers leave: 248 with ws_regs_out 232, 256 with 224 or less),
outputs ws_regs_out = 224, the loader's warpgroup ws_regs_load = 24 (CONFIG). S alone is BV registers
a thread; to stay under 256 with the [BT, BV] tiles beside it, the recurrence keeps no segment index
live across its loop (it looks them up again for the final store) and indexes g and f from the
kernel's pointers. ptxas (Triton 3.6, sm_90a, scripts/device/gdn_ws_compile.py): no spills at BV 128
and 64, with and without h0; shared memory 192.6 KB (BV 128) and 144.6 KB (BV 64).
Requires sm_90a and Triton's Gluon (3.6 on the device): Triton's interpreter cannot run it, so the
CPU path keeps fwd.py's kernel (CONFIG["fwd"] = "triton").
"""

from __future__ import annotations

import torch
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
def _ws_gate_loads(g_ptr, f_ptr, t0, t_stop, i_h, HV: gl.constexpr, BT: gl.constexpr, row_l: gl.constexpr):
    """One chunk's g (on a plain blocked vector, for the scan) and f (on the rows of an accumulator layout);
    t0 is the chunk's first token and t_stop the sequence's end (absolute); rows at or past t_stop read 0.
    Issued a chunk ahead by both consumers: the loads are strided by HV (one line a row), and waited for
    in the same chunk they put a global round trip on the serial path of every chunk."""
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    o_t = t0 + gl.arange(0, BT, layout=vec_l)
    b_g = gl.load(g_ptr + (o_t.to(gl.int64) * HV + i_h), mask=o_t < t_stop, other=0.0)
    o_r = t0 + gl.arange(0, BT, layout=row_l)
    b_f = gl.load(f_ptr + (o_r.to(gl.int64) * HV + i_h), mask=o_r < t_stop, other=0.0)
    return b_g, b_f


@gluon.jit
def _ws_gates(b_g, t0, t_stop, BT: gl.constexpr, row_l: gl.constexpr):
    """gam = cumsum(g) and gl = sum(g) in log2 units on the accumulator rows, and the rows' validity."""
    b_gam = gl.associative_scan(b_g, 0, _ws_add) * LOG2E
    b_gl = gl.sum(b_g, 0) * LOG2E
    m_r = (t0 + gl.arange(0, BT, layout=row_l)) < t_stop
    return gl.convert_layout(b_gam, row_l), b_gl, m_r


@gluon.jit
def _ws_loader(q_desc, k_desc, v_desc, tb_desc, p_desc, q_s, k_s, v_s, tb_s, p_s, ld_ready, ld_empty,
               row0, col_qk, col_v, col_tp, n_ch, BT: gl.constexpr, STAGES: gl.constexpr):
    """TMA of chunk c's five tiles into slot c % STAGES, once both consumers released its last use."""
    nbytes: gl.constexpr = (q_desc.block_type.nbytes + k_desc.block_type.nbytes + v_desc.block_type.nbytes
                            + tb_desc.block_type.nbytes + p_desc.block_type.nbytes)
    for c in range(n_ch):
        slot = c % STAGES
        mbarrier.wait(ld_empty.index(slot), ((c // STAGES) & 1) ^ 1)
        bar = ld_ready.index(slot)
        mbarrier.expect(bar, nbytes)
        row = row0 + c * BT
        # the recurrence's tiles first: it is the serial path
        tma.async_copy_global_to_shared(k_desc, [row, col_qk], bar, k_s.index(slot))
        tma.async_copy_global_to_shared(v_desc, [row, col_v], bar, v_s.index(slot))
        tma.async_copy_global_to_shared(tb_desc, [row, col_tp], bar, tb_s.index(slot))
        tma.async_copy_global_to_shared(q_desc, [row, col_qk], bar, q_s.index(slot))
        tma.async_copy_global_to_shared(p_desc, [row, col_tp], bar, p_s.index(slot))


@gluon.jit
def _ws_segment(cu_ptr, cus_ptr, N, SEG, LOG_N: gl.constexpr, BT: gl.constexpr):
    """Program i_s's segment: its sequence (N for a surplus program), index j in the sequence, the
    sequence's segment count, first token and length, and the segment's first local token and chunk count."""
    i_s = gl.program_id(2)
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
def _ws_recurrence(k_s, v_s, tb_s, hs_s, xs_s, vd_s, ld_ready, ld_empty, hs_ready, hs_free, vd_ready, vd_free,
                   g_ptr, f_ptr, h0_ptr, ht_ptr, mc_ptr, cu_ptr, cus_ptr, N, SEG,
                   HV: gl.constexpr, K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr,
                   LOG_N: gl.constexpr, STAGES: gl.constexpr, HAS_H0: gl.constexpr):
    """The state recurrence of one segment (default partition, one warpgroup): S [K, BV] fp32 in the
    wgmma accumulator layout from the entering state to the segment's exit, written when it is the
    sequence's last segment. The segment's indices are looked up again after the loop (four loads,
    L2 hits) rather than kept: S and the chunk's [BT, BV] tiles take the 256 registers a thread."""
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BV, 16])
    row_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    i_v = gl.program_id(0)
    i_h = gl.program_id(1)
    seq, j, nseg, bos, L, t_beg, n_ch = _ws_segment(cu_ptr, cus_ptr, N, SEG, LOG_N, BT)
    o_k = gl.arange(0, K, layout=row_l)
    o_v = i_v * BV + gl.arange(0, BV, layout=gl.SliceLayout(0, acc_l))
    if j == 0:
        b_h = gl.zeros([K, BV], gl.float32, acc_l)
        if HAS_H0:
            b_h = gl.load(h0_ptr + ((seq * HV + i_h) * K + o_k[:, None]).to(gl.int64) * V + o_v[None, :])
    else:  # the chain left the state entering segment i_s in the C slot of segment i_s - 1
        p_mc = mc_ptr + ((gl.program_id(2) - 1) * HV + i_h).to(gl.int64) * K * (K + V)
        b_h = gl.load(p_mc + o_k[:, None] * (K + V) + K + o_v[None, :])
    t_first = bos + t_beg  # absolute tokens from here on: fewer live values in the loop
    t_stop = bos + L
    b_zero = gl.zeros([BT, BV], gl.float32, acc_l)
    b_gn, b_fn = _ws_gate_loads(g_ptr, f_ptr, t_first, t_stop, i_h, HV, BT, row_l)
    for c in range(n_ch):
        slot = c % STAGES
        t0 = t_first + c * BT
        b_g, b_f = b_gn, b_fn
        b_gn, b_fn = _ws_gate_loads(g_ptr, f_ptr, t0 + BT, t_stop, i_h, HV, BT, row_l)
        b_gam, b_gl, m_r = _ws_gates(b_g, t0, t_stop, BT, row_l)
        mbarrier.wait(ld_ready.index(slot), (c // STAGES) & 1)
        k_c = k_s.index(slot)
        # publish bf16(S) once the outputs' q hs of chunk c - 1 has read the previous one
        mbarrier.wait(hs_free, (c & 1) ^ 1)
        hs_s.store(b_h.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(hs_ready, count=1)
        u_tok = warpgroup_mma(k_c, hs_s, b_zero, use_acc=False, is_async=True)
        b_v = v_s.index(slot).load(acc_l)
        b_u = warpgroup_mma_wait(num_outstanding=0, deps=(u_tok, ))
        b_x = gl.where(m_r[:, None], b_v.to(gl.float32) - b_u * gl.exp2(b_gam)[:, None], 0.0)
        xs_s.store(b_x.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        b_vn = warpgroup_mma(tb_s.index(slot), xs_s, b_zero, use_acc=False)
        b_vd = gl.where(m_r[:, None], b_vn * gl.exp2(b_f)[:, None], 0.0).to(gl.bfloat16)
        mbarrier.wait(vd_free, (c & 1) ^ 1)
        vd_s.store(b_vd)
        # vdk: the integer part of gl - gam that f leaves (rounded: robust to ulps), on V~ instead of k;
        # into xs (the Tb product that read x is complete: synchronous wgmma)
        xs_s.store((b_vd.to(gl.float32) * gl.exp2(gl.floor(b_gl - b_gam - b_f + 0.5))[:, None]).to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(vd_ready, count=1)
        b_h = warpgroup_mma(k_c.permute((1, 0)), xs_s, b_h * gl.exp2(b_gl))
        mbarrier.arrive(ld_empty.index(slot), count=1)
    seq, j, nseg, bos, L, t_beg, n_ch = _ws_segment(cu_ptr, cus_ptr, N, SEG, LOG_N, BT)
    if j == nseg - 1:
        o_k = gl.arange(0, K, layout=row_l)
        o_v = gl.program_id(0) * BV + gl.arange(0, BV, layout=gl.SliceLayout(0, acc_l))
        p_ht = ht_ptr + ((seq * HV + gl.program_id(1)) * K + o_k[:, None]).to(gl.int64) * V + o_v[None, :]
        gl.store(p_ht, b_h)


@gluon.jit
def _ws_output(q_s, p_s, hs_s, vd_s, ld_ready, ld_empty, hs_ready, hs_free, vd_ready, vd_free,
               g_ptr, f_ptr, o_ptr, i_h, i_v, t_first, t_stop, n_ch, scale,
               HV: gl.constexpr, V: gl.constexpr, BT: gl.constexpr, BV: gl.constexpr, STAGES: gl.constexpr):
    """The outputs of one segment (worker, one warpgroup): o = (q hs) 2^gam scale + P vd per chunk, stored
    as bf16 on rows < L. t_first is the segment's first token, t_stop the sequence's end (absolute)."""
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BV, 16])
    row_l: gl.constexpr = gl.SliceLayout(1, acc_l)
    o_c = i_v * BV + gl.arange(0, BV, layout=gl.SliceLayout(0, acc_l))
    b_zero = gl.zeros([BT, BV], gl.float32, acc_l)
    b_gn, b_fn = _ws_gate_loads(g_ptr, f_ptr, t_first, t_stop, i_h, HV, BT, row_l)
    for c in range(n_ch):
        slot = c % STAGES
        t0 = t_first + c * BT
        b_g = b_gn
        b_gn, b_fn = _ws_gate_loads(g_ptr, f_ptr, t0 + BT, t_stop, i_h, HV, BT, row_l)
        b_gam, b_gl, m_r = _ws_gates(b_g, t0, t_stop, BT, row_l)
        mbarrier.wait(ld_ready.index(slot), (c // STAGES) & 1)
        mbarrier.wait(hs_ready, c & 1)
        b_o = warpgroup_mma(q_s.index(slot), hs_s, b_zero, use_acc=False)
        mbarrier.arrive(hs_free, count=1)
        b_o = b_o * (gl.exp2(b_gam) * scale)[:, None]
        mbarrier.wait(vd_ready, c & 1)
        b_o = warpgroup_mma(p_s.index(slot), vd_s, b_o)
        mbarrier.arrive(vd_free, count=1)
        mbarrier.arrive(ld_empty.index(slot), count=1)
        o_r = (t0 + gl.arange(0, BT, layout=row_l)).to(gl.int64) * (HV * V) + i_h * V
        gl.store(o_ptr + (o_r[:, None] + o_c[None, :]), b_o.to(gl.bfloat16), mask=m_r[:, None])


@gluon.jit
def _fwd_ws_kernel(
    q_desc, k_desc, v_desc, tb_desc, p_desc, g_ptr, f_ptr, o_ptr, h0_ptr, ht_ptr, mc_ptr, cu_ptr, cus_ptr,
    N, SEG, scale, HV: gl.constexpr, HK: gl.constexpr, K: gl.constexpr, V: gl.constexpr, BT: gl.constexpr,
    BV: gl.constexpr, LOG_N: gl.constexpr, HAS_H0: gl.constexpr, STAGES: gl.constexpr,
    REGS_OUT: gl.constexpr, REGS_LOAD: gl.constexpr,
):
    """o [T, HV, V] bf16 and the final states [N, HV, K, V] fp32 from q, k, v, Tb and P (TMA descriptors
    over their [T, heads * width] views), g and f [T, HV] fp32 and the entering states (h0
    [N, HV, K, V], or the C slots of [M | C] [segments, HV, K, K + V]): _fwd_kernel's results."""
    gl.static_assert(K == 128, "the recurrence's wgmma tiles assume K = 128")
    gl.static_assert(BT == 64, "one wgmma M tile (4 warps x 16 rows) a chunk")
    i_v = gl.program_id(0)
    i_h = gl.program_id(1)
    seq, j, nseg, bos, L, t_beg, n_ch = _ws_segment(cu_ptr, cus_ptr, N, SEG, LOG_N, BT)
    if seq >= N:
        return  # surplus program: before any shared memory or barrier exists
    i_hk = i_h // (HV // HK)

    qk_l: gl.constexpr = k_desc.layout
    v_l: gl.constexpr = v_desc.layout
    tp_l: gl.constexpr = tb_desc.layout
    h_l: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, K], qk_l)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, K], qk_l)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, BV], v_l)
    tb_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, BT], tp_l)
    p_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BT, BT], tp_l)
    hs_s = gl.allocate_shared_memory(gl.bfloat16, [K, BV], h_l)
    xs_s = gl.allocate_shared_memory(gl.bfloat16, [BT, BV], h_l)
    vd_s = gl.allocate_shared_memory(gl.bfloat16, [BT, BV], h_l)
    bar_l: gl.constexpr = mbarrier.MBarrierLayout()
    ld_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_l)
    ld_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_l)
    hs_ready = gl.allocate_shared_memory(gl.int64, [1], bar_l)
    hs_free = gl.allocate_shared_memory(gl.int64, [1], bar_l)
    vd_ready = gl.allocate_shared_memory(gl.int64, [1], bar_l)
    vd_free = gl.allocate_shared_memory(gl.int64, [1], bar_l)
    for i in gl.static_range(STAGES):
        mbarrier.init(ld_ready.index(i), count=1)
        mbarrier.init(ld_empty.index(i), count=2)  # the recurrence and the outputs
    mbarrier.init(hs_ready, count=1)
    mbarrier.init(hs_free, count=1)
    mbarrier.init(vd_ready, count=1)
    mbarrier.init(vd_free, count=1)
    fence_async_shared()  # the inits visible to the async proxy (TMA) before the first use

    gl.warp_specialize([
        (_ws_recurrence, (k_s, v_s, tb_s, hs_s, xs_s, vd_s, ld_ready, ld_empty, hs_ready, hs_free, vd_ready,
                          vd_free, g_ptr, f_ptr, h0_ptr, ht_ptr, mc_ptr, cu_ptr, cus_ptr, N, SEG,
                          HV, K, V, BT, BV, LOG_N, STAGES, HAS_H0)),
        (_ws_output, (q_s, p_s, hs_s, vd_s, ld_ready, ld_empty, hs_ready, hs_free, vd_ready, vd_free,
                      g_ptr, f_ptr, o_ptr, i_h, i_v, bos + t_beg, bos + L, n_ch, scale, HV, V, BT, BV, STAGES)),
        (_ws_loader, (q_desc, k_desc, v_desc, tb_desc, p_desc, q_s, k_s, v_s, tb_s, p_s, ld_ready, ld_empty,
                      bos + t_beg, i_hk * K, i_h * V + i_v * BV, i_h * BT, n_ch, BT, STAGES)),
    ], [4, 1], [REGS_OUT, REGS_LOAD])


def _ws_smem_layout():
    """Every TMA box here has rows of >= 128 bytes: 128-byte swizzle (the in-kernel hs/xs/vd tiles match)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)


def _ws_desc(x, width, box_cols):
    """TMA descriptor over x [T, heads, width] viewed as [T, heads * width], box [BT, box_cols]. Built per call
    (a Python object, a few us): a cache would have to hold its base tensor, and Tb and P are fresh
    temporaries every call, so it would keep the previous call's alive."""
    flat = x.view(x.shape[0], x.shape[1] * width)
    return TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [BT, box_cols], _ws_smem_layout())


def _ws_arg_key(a, _tensor=torch.Tensor):
    """common._launch_key, and a tensor descriptor's dtype, alignment, shape, strides and box."""
    t = type(a)
    if t is int:
        return a
    if isinstance(a, _tensor):
        return (a.dtype, a.device, a.data_ptr() & 15)
    if t is float or t is bool:
        return (t, a)
    base = a.base  # a host TensorDescriptor
    return (base.dtype, base.device, base.data_ptr() & 15, *a.shape, *a.strides, *a.block_shape)


_WS_LAUNCH = _Launch(_fwd_ws_kernel, _ws_arg_key)


def _fwd_ws(q, k, v, g, tb, pbuf, fdec, o, h0, ht, mc, cu, cus, N, seg, nseg_bound, scale, log_n, has_h0, cfg):
    """_fwd_ws_kernel over every segment: q, k [T, HK, K] bf16; v [T, HV, V] bf16; g [T, HV] fp32; Tb and P
    [T, HV, BT] bf16; f [T, HV] fp32; h0 [N, HV, K, V] fp32 (any tensor when has_h0 is False); [M | C]
    [segments, HV, K, K + V] fp32 (any tensor without CP) -> o [T, HV, V] bf16 and the final states
    ht [N, HV, K, V] fp32, written in place (what _fwd writes).

    cfg: ws_BV (value columns a CTA: 128, one CTA owns the head's whole state; 64 also compiles),
    ws_regs_out / ws_regs_load (setmaxnreg of the output warpgroup and of the loader warp's warpgroup;
    the recurrence, Triton's default partition, gets what Triton 3.6 gives it, see
    scripts/device/gdn_ws_compile.py). All tensors contiguous."""
    T, HK, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    if T == 0:  # no chunk to load (a TMA box needs rows): only final states, which _fwd writes
        _fwd(q, k, v, g, tb, pbuf, fdec, o, h0, ht, mc, cu, cus, N, seg, nseg_bound, scale, log_n, has_h0, cfg)
        return
    bv = cfg["ws_BV"]
    descs = (_ws_desc(q, K, K), _ws_desc(k, K, K), _ws_desc(v, V, bv), _ws_desc(tb, BT, BT), _ws_desc(pbuf, BT, BT))
    _WS_LAUNCH((V // bv, HV, nseg_bound), (*descs, g, fdec, o, h0, ht, mc, cu, cus, N, seg, scale),
               dict(HV=HV, HK=HK, K=K, V=V, BT=BT, BV=bv, LOG_N=log_n, HAS_H0=has_h0, STAGES=cfg["ws_stages"],
                    REGS_OUT=cfg["ws_regs_out"], REGS_LOAD=cfg["ws_regs_load"], num_warps=4))

