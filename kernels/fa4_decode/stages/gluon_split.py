"""The Gluon split kernel for Hopper (sm_90a): needs a real sm_90 GPU; Triton's interpreter cannot run Gluon.

Measured: ptxas for sm_90a offline (scripts/device/fa4_decode_gluon_compile.py): no spills. On a GPU it has
only matched the Triton kernel on smoke case S1 (H100, 2026-12-07; one split a sequence, o written by
this kernel, with 132 SMs and with 3 assumed): the merge path is unchecked on a GPU, nothing timed. Its
first form (one CTA per item, in git before 2026-12-07) passed the gate on smoke and edge on an H100 and
ran 1.03x the baseline geomean over the 20 full shapes under graph replay (docs/perf/fa4_decode.md).

Design (_fa4_decode_gluon_kernel; flash-decoding, memory-bound):
- Persistent: min(SMs, B x Hkv x S) CTAs, one an SM (shared memory), from shapes only (no host sync). S is
  the Triton kernel's shape-only split count (num_splits_for with BLOCK_N 64); it sizes the partials. Every
  CTA reads all kv_lens and builds the call's item table: sequence b gets n_b = cdiv(kv_len_b, chunk_b)
  splits of chunk_b keys, chunk_b = max(the "target" chunk cdiv(kv_len_b, S) rounded up to 64, the
  balanced chunk), and the items (b, KV head, split) are numbered sequence-major by a prefix sum over the
  sequences. CTA p takes items p, p + grid, ... Only items with keys exist, so no CTA starts for an empty
  split (a one-CTA-an-SM kernel cannot hide one), and the loader's ring runs on across a CTA's items: the
  next item's K/V loads are in flight while the consumer stores this one's partial and loads the next Q.
- SPLIT_POLICY "balanced": the balanced chunk is the Triton kernel's _split_chunk (BALANCE) with the SMs as
  the slots, the chunk c minimising waves(c) x (c + SPLIT_OVERHEAD_TOKENS) (on uniform batches one item an
  SM: D2 16 x 32768 keys -> 128 items of 4096); otherwise 0 (the "target" chunk). The merge kernel computes
  the same integers with the same constexprs.
- M tile: 64 rows, one consumer warpgroup (wgmma M = 64). Row r = j * G + g holds draft j of query head
  kvh * G + g (the Triton kernel's packing); rows r >= q_len * G are padding: their Q is zero and their
  outputs are never stored. So every K/V byte is read once per KV head.
- gl.warp_specialize, two partitions:
    default (4 warps)  consumer warpgroup: Q, S = Q K^T, online softmax, O += P V, the output.
    worker  (1 warp)   loader: reads the page table and TMAs K and V blocks of 64 keys (a 128-token page is
                       two boxes) into rings of STAGES slots each.
  The CTA has 8 warps (Triton pads the loader warp to a warpgroup): 255 registers a thread at launch; at the
  region's start setmaxnreg gives the loader's warpgroup gluon_regs_load (48) and the consumer 256, which
  holds O [64, 256] fp32 (128 registers a thread), S, P and the softmax state without spilling (ptxas,
  Triton 3.6.0, offline; figures in CONFIG's comments). One CTA per SM (registers and shared memory).
- Caches are viewed as 2-D [num_pages * 128, Hkv * 256]; the box [64, 256] of keys n0 .. n0 + 63 of KV
  head kvh is at [page_table[b, n0 // 128] * 128 + n0 % 128, kvh * 256]. The loader only loads blocks
  that start below the split's end (<= kv_len), so it never reads a page-table slot past the sequence's
  last page (those may hold anything).
- Q is loaded once per item by the consumer with masked pointer loads (64-column chunks of a blocked
  layout, zero past row q_len * G), stored into an NVMMA-swizzled shared tile, fenced for the async proxy
  (fence_async_shared + warpgroup barrier) before the first wgmma. 32 KB; no TMA for Q (its rows are a
  strided gather of heads and drafts).
- Barriers per ring slot: k_ready / v_ready (count 1: the loader's expect-tx arrival, completed by the
  TMA's bytes) and k_empty / v_empty (count 1: the consumer warpgroup's arrival once the wgmma reading the
  slot has retired). The CTA's i-th block, counted over all its items, uses slot i % STAGES with parity
  (i // STAGES) & 1; the loader waits the empty barriers with the flipped parity, so its first pass over
  the ring does not block (the prefill kernel's protocol, kernels/fa4_prefill/stages/gluon_fwd.py).
- Consumer, per block: S = Q K^T (warpgroup_mma, M 64, N 64, K 256), release K; keys >= the row's limit
  min(kv_len - q_len + j + 1, split end) replaced by -inf with `where` (never a multiply: the cache holds
  NaN past kv_len); online softmax in base 2 (log2(e) folded into the scale), fp32 row max / sum, the max
  starting at -1e30 so a row that sees no key gets p = 0, never -inf - -inf; P to bf16 as the register A
  operand; on the block that holds kv_len the V rows >= kv_len are zeroed in shared memory before P V
  (0 * NaN = NaN), then fence and warpgroup barrier; O += P V (warpgroup_mma, N 256); release V.
  No intra-warpgroup overlap (S of the next block issued while P V runs): the kernel is bound by HBM
  (64 KB of K+V a block against ~4 MFLOP of wgmma), and the loader keeps STAGES blocks in flight.
- End: for a sequence of one split, o = O / l stored as bf16 for the real rows (the merge skips that
  sequence: SKIP_ONE); with several, the partial (fp32 O / l and the base-2 log-sum-exp m + log2(l), -inf
  for a row that saw no key) goes to the same scratch and layout the Triton split kernel writes, and the
  Triton merge kernel (_fa4_decode_merge_kernel) runs as on the Triton path.
- Shared memory: Q 32 KB + STAGES x (32 KB K + 32 KB V) + barriers: STAGES 2 -> 160 KB, 3 -> 224 KB,
  both under the 227 KB of an H100/H200 CTA (4 would not be); one CTA per SM either way.

Not done (the next candidates):
- FUSED_MERGE (Triton path only); the merge is a second launch;
- no overlap of the softmax with the tensor cores, no ping-pong between two consumer warpgroups;
- the 64-row tile is mostly padding at q_len 1 (16 of 64 rows for G 16): wasted wgmma work, not bytes;
- output stored from the wgmma accumulator layout with masked pointer stores, not through shared memory.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor

from .common import _LOG2E, _PLAN_COUNT, _PLANS_MAX, _Launch, _num_sms, _partials, _scratch, num_splits_for
from .triton_split import _merge

# The Gluon kernel (sm_90a). Its tile is fixed; its tunables are CONFIG's gluon_* keys.
_GL_BLOCK_M = 64  # packed rows a CTA: one consumer warpgroup (wgmma M = 64)
_GL_BLOCK_N = 64  # keys a block: half a page, one [64, 256] TMA box (32 KB)
_GL_PAGE = 128
_GL_HEAD_D = 256


@gluon.jit
def _gl_add(a, b):
    return a + b


@gluon.jit
def _gl_waves_cost(lens, c, HKV: gl.constexpr, SLOTS: gl.constexpr, OVERHEAD: gl.constexpr):
    # waves(c) x (c + OVERHEAD), as _waves_cost
    return gl.cdiv(HKV * gl.sum(gl.cdiv(lens, c), 0), SLOTS) * (c + OVERHEAD)


@gluon.jit
def _gl_balanced_chunk(kvl_ptr, n_seqs, HKV: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_B: gl.constexpr,
                       SLOTS: gl.constexpr, MIN_CHUNK: gl.constexpr, OVERHEAD: gl.constexpr, NW: gl.constexpr):
    # _split_chunk's BALANCE part, integer for integer (the merge kernel runs the Triton one and must count the
    # same splits): the chunk c minimising waves(c) x (c + OVERHEAD) over the fair share times 1 + k/8 and
    # the longest sequence cut evenly. NW: the warps of the partition that runs it.
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    i_b = gl.arange(0, BLOCK_B, layout=lay)
    lens = gl.load(kvl_ptr + i_b, mask=i_b < n_seqs, other=0)
    fair = gl.maximum(gl.cdiv(HKV * gl.sum(lens, 0), SLOTS), MIN_CHUNK)
    fair = gl.cdiv(fair, BLOCK_N) * BLOCK_N
    best_c = fair
    best_cost = _gl_waves_cost(lens, fair, HKV, SLOTS, OVERHEAD)
    for k in gl.static_range(1, 9):
        c = gl.cdiv(fair * (8 + k) // 8, BLOCK_N) * BLOCK_N
        cost = _gl_waves_cost(lens, c, HKV, SLOTS, OVERHEAD)
        best_c = gl.where(cost < best_cost, c, best_c)
        best_cost = gl.minimum(cost, best_cost)
    longest = gl.max(lens, 0)
    k0 = gl.cdiv(longest, fair)
    for j in gl.static_range(0, 8):
        c = gl.cdiv(gl.cdiv(longest, gl.maximum(k0 - j, 1)), BLOCK_N) * BLOCK_N
        cost = _gl_waves_cost(lens, c, HKV, SLOTS, OVERHEAD)
        best_c = gl.where(cost < best_cost, c, best_c)
        best_cost = gl.minimum(cost, best_cost)
    return best_c


@gluon.jit
def _gl_item_table(kvl_ptr, n_seqs, min_chunk, NUM_SPLITS, HKV: gl.constexpr, BLOCK_N: gl.constexpr,
                   BLOCK_B: gl.constexpr, NW: gl.constexpr):
    # The call's work items, (sequence, KV head, split) for every non-empty split, numbered sequence-major:
    # sequence b has n_b = cdiv(kv_len_b, chunk_b) splits, chunk_b = max(the "target" chunk, min_chunk)
    # (min_chunk: the balanced chunk, or 0), and items ends_b - HKV * n_b .. ends_b - 1. Vectors over the
    # B <= BLOCK_B sequences in a layout of NW warps (each partition builds its own once).
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    i_b = gl.arange(0, BLOCK_B, layout=lay)
    m_b = i_b < n_seqs
    lens = gl.load(kvl_ptr + i_b, mask=m_b, other=0)
    chunks = gl.maximum(gl.cdiv(gl.cdiv(lens, NUM_SPLITS), BLOCK_N) * BLOCK_N, min_chunk)
    chunks = gl.maximum(chunks, BLOCK_N)  # padding lanes (kv_len 0) divide by something
    n_sp = gl.where(m_b, gl.cdiv(lens, chunks), 0)
    ends = gl.associative_scan(n_sp * HKV, 0, _gl_add)
    return i_b, lens, chunks, n_sp, ends


@gluon.jit
def _gl_item(w, table, HKV: gl.constexpr, BLOCK_N: gl.constexpr):
    # Item w -> (b, kvh, split, kv_len, its keys n_start .. n_end - 1 in n_blocks blocks, splits of b): b is
    # the number of sequences whose items all come before w; the rest are masked sums picking lane b.
    i_b, lens, chunks, n_sp, ends = table
    b = gl.sum((ends <= w).to(gl.int32), 0)
    sel = i_b == b
    n_b = gl.sum(gl.where(sel, n_sp, 0), 0)
    local = w - (gl.sum(gl.where(sel, ends, 0), 0) - n_b * HKV)
    kv_len = gl.sum(gl.where(sel, lens, 0), 0)
    chunk = gl.sum(gl.where(sel, chunks, 0), 0)
    split = local % n_b
    n_start = split * chunk
    n_end = gl.minimum(n_start + chunk, kv_len)
    return b, local // n_b, split, kv_len, n_start, n_end, gl.cdiv(n_end - n_start, BLOCK_N), n_b


@gluon.jit
def _gl_loader(k_desc, v_desc, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, pt_ptr, kvl_ptr, stride_pt,
               n_seqs, min_chunk, NUM_SPLITS,
               HKV: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr, PAGE: gl.constexpr,
               HEAD_D: gl.constexpr, BLOCK_B: gl.constexpr):
    # Worker partition (1 warp): this CTA's items w = pid, pid + grid, ...; per item the blocks i of keys
    # n_start + i * BLOCK_N, each a K box and a V box, into the rings. The ring's slot and phase count blocks
    # over all the CTA's items (`it`), so the next item's loads start while the consumer finishes this one.
    # n_start and the chunk are multiples of BLOCK_N, which divides PAGE: a box never crosses a page, and
    # every block starts below kv_len, so the page-table slot read is one of the sequence's own pages.
    table = _gl_item_table(kvl_ptr, n_seqs, min_chunk, NUM_SPLITS, HKV, BLOCK_N, BLOCK_B, 1)
    it = 0
    for w in range(gl.program_id(0), gl.max(table[4], 0), gl.num_programs(0)):  # table[4]: ends; its max, the items
        b, kvh, split, kv_len, n_start, n_end, n_blocks, n_b = _gl_item(w, table, HKV, BLOCK_N)
        pt_row = pt_ptr + b.to(gl.int64) * stride_pt
        for i in range(n_blocks):
            n0 = n_start + i * BLOCK_N
            row = gl.load(pt_row + n0 // PAGE) * PAGE + n0 % PAGE
            slot = it % STAGES
            phase = (it // STAGES) & 1
            # phase ^ 1: the first pass over the ring passes at once (a fresh barrier's previous phase
            # counts as complete); later passes wait until the consumer released the slot.
            mbarrier.wait(k_empty.index(slot), phase ^ 1)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [row, kvh * HEAD_D], k_ready.index(slot), k_smem.index(slot))
            mbarrier.wait(v_empty.index(slot), phase ^ 1)
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [row, kvh * HEAD_D], v_ready.index(slot), v_smem.index(slot))
            it += 1


@gluon.jit
def _gl_load_q(q_ptr, q_smem, b, kvh, stride_qt, stride_qh,
               Q_LEN: gl.constexpr, G: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_D: gl.constexpr):
    # Q tile [BLOCK_M, HEAD_D] into shared memory: row r = j * G + g is draft j (q row b * Q_LEN + j) of
    # head kvh * G + g; rows >= Q_LEN * G are zero. In 64-column chunks (16 registers a thread each, with
    # 16-byte vectors) so the whole 32 KB tile never sits in registers.
    Q_CHUNK: gl.constexpr = 64
    blk: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    i_r = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, blk))
    m_r = i_r < Q_LEN * G
    p_row = q_ptr + (b * Q_LEN + i_r // G).to(gl.int64) * stride_qt + (kvh * G + i_r % G) * stride_qh
    gl.thread_barrier()  # the previous item's wgmmas (all waited) read q_smem in every warp before this
    for c in gl.static_range(HEAD_D // Q_CHUNK):
        i_d = c * Q_CHUNK + gl.arange(0, Q_CHUNK, layout=gl.SliceLayout(0, blk))
        b_q = gl.load(p_row[:, None] + i_d[None, :], mask=m_r[:, None], other=0.0)
        q_smem.slice(c * Q_CHUNK, Q_CHUNK, dim=1).store(b_q)
    fence_async_shared()  # generic-proxy writes before the async-proxy (wgmma) reads
    gl.thread_barrier()  # every warp of the warpgroup has written its rows


@gluon.jit
def _gl_zero_v_tail(v_buf, n0, kv_len, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr):
    # The block holding kv_len: its V rows n0 + r >= kv_len lie past the sequence (the page's tail, NaN in
    # the gate's pool) and 0 * NaN = NaN in P V, so they are overwritten with 0 in shared memory. In
    # 64-column chunks (16 registers a thread each): the whole block would need 64 beside O's 128.
    V_CHUNK: gl.constexpr = 64
    blk: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # 16-byte vectors
    i_n = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, blk))
    m_keep = (i_n < kv_len)[:, None]
    for c in gl.static_range(HEAD_D // V_CHUNK):
        chunk = v_buf.slice(c * V_CHUNK, V_CHUNK, dim=1)
        b_v = chunk.load(blk)
        chunk.store(gl.where(m_keep, b_v, gl.zeros_like(b_v)))
    fence_async_shared()  # generic-proxy writes before the async-proxy (wgmma) read
    gl.thread_barrier()  # every warp of the warpgroup has written its part


@gluon.jit
def _gl_consumer(q_ptr, o_ptr, op_ptr, lsep_ptr, kvl_ptr, q_smem, k_smem, v_smem, k_ready, k_empty, v_ready,
                 v_empty, n_seqs, min_chunk, NUM_SPLITS, qk_scale,
                 stride_qt, stride_qh, stride_ot, stride_oh,
                 stride_opt, stride_oph, stride_ops, stride_lt, stride_lh,
                 Q_LEN: gl.constexpr, G: gl.constexpr, HKV: gl.constexpr, BLOCK_M: gl.constexpr,
                 BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
                 BLOCK_B: gl.constexpr):
    # Default partition (4 warps, one warpgroup): the loader's items in the loader's order; wgmma layouts of
    # S [64, 64] and O [64, 256]; P as O's A operand from registers.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_l: gl.constexpr = gl.SliceLayout(1, s_layout)
    i_r = gl.arange(0, BLOCK_M, layout=row_l)
    i_nb = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    i_ro = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    i_d = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, o_layout))
    m_ro = (i_ro < Q_LEN * G)[:, None]
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    table = _gl_item_table(kvl_ptr, n_seqs, min_chunk, NUM_SPLITS, HKV, BLOCK_N, BLOCK_B, 4)
    it = 0
    for w in range(gl.program_id(0), gl.max(table[4], 0), gl.num_programs(0)):  # table[4]: ends; its max, the items
        b, kvh, split, kv_len, n_start, n_end, n_blocks, n_b = _gl_item(w, table, HKV, BLOCK_N)
        _gl_load_q(q_ptr, q_smem, b, kvh, stride_qt, stride_qh, Q_LEN, G, BLOCK_M, HEAD_D)
        # Keys row r = j * G + g sees in this split: [n_start, min(kv_len - Q_LEN + j + 1, n_end)). Padding
        # rows (j >= Q_LEN) get n_end: zero scores, never stored.
        lim = gl.minimum(kv_len - Q_LEN + i_r // G + 1, n_end)
        m_i = gl.full([BLOCK_M], -1.0e30, gl.float32, row_l)  # finite: a row with no visible key gets p = 0
        l_i = gl.zeros([BLOCK_M], gl.float32, row_l)
        acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)
        for i in range(n_blocks):
            slot = it % STAGES
            phase = (it // STAGES) & 1
            n0 = n_start + i * BLOCK_N
            mbarrier.wait(k_ready.index(slot), phase)
            s_tok = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False,
                                  is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
            mbarrier.arrive(k_empty.index(slot), count=1)
            # where, not a multiply: scores of keys past kv_len may be NaN (the cache's page tail)
            s = gl.where((n0 + i_nb)[None, :] < lim[:, None], s, float("-inf"))
            # base-2 online softmax, scale folded into one FMA per score (s * scale - m)
            m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
            p = gl.exp2(s * qk_scale - m_new[:, None])
            alpha = gl.exp2(m_i - m_new)
            l_i = l_i * alpha + gl.sum(p, 1)
            m_i = m_new
            p_op = gl.convert_layout(p.to(gl.bfloat16), p_layout)
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
            mbarrier.wait(v_ready.index(slot), phase)
            if n0 + BLOCK_N > kv_len:  # only the sequence's last block holds rows >= kv_len
                _gl_zero_v_tail(v_smem.index(slot), n0, kv_len, BLOCK_N, HEAD_D)
            o_tok = warpgroup_mma(p_op, v_smem.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
            mbarrier.arrive(v_empty.index(slot), count=1)
            it += 1

        has = l_i > 0.0  # a draft row can see no key of a late split
        l_safe = gl.where(has, l_i, 1.0)
        out = acc * gl.convert_layout(1.0 / l_safe, gl.SliceLayout(1, o_layout))[:, None]
        i_qrow = (b * Q_LEN + i_ro // G).to(gl.int64)
        i_head = kvh * G + i_ro % G
        if SPLIT and n_b > 1:
            # the Triton split kernel's partials: o [B*q_len, Hq, S, D] and lse [B*q_len, Hq, S], fp32
            p_op = op_ptr + i_qrow * stride_opt + i_head * stride_oph + split * stride_ops
            gl.store(p_op[:, None] + i_d[None, :], out, mask=m_ro)
            lse = gl.where(has, m_i + gl.log2(l_safe), float("-inf"))
            p_l = (lsep_ptr + (b * Q_LEN + i_r // G).to(gl.int64) * stride_lt + (kvh * G + i_r % G) * stride_lh
                   + split)
            gl.store(p_l, lse, mask=i_r < Q_LEN * G)
        else:  # the sequence's only split: o itself (the merge skips a sequence of one split)
            p_o = o_ptr + i_qrow * stride_ot + i_head * stride_oh
            gl.store(p_o[:, None] + i_d[None, :], out.to(gl.bfloat16), mask=m_ro)


@gluon.jit
def _fa4_decode_gluon_kernel(
    q_ptr, k_desc, v_desc, o_ptr, pt_ptr, kvl_ptr, op_ptr, lsep_ptr,
    qk_scale,
    stride_qt, stride_qh,
    stride_ot, stride_oh,
    stride_pt,
    stride_opt, stride_oph, stride_ops,  # partial o  [B*q_len, Hq, S, D]
    stride_lt, stride_lh,  # partial lse [B*q_len, Hq, S]
    n_seqs, NUM_SPLITS,
    Q_LEN: gl.constexpr, G: gl.constexpr, HKV: gl.constexpr, PAGE: gl.constexpr, HEAD_D: gl.constexpr,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
    REGS_LOADER: gl.constexpr, BALANCE: gl.constexpr, BLOCK_B: gl.constexpr, SLOTS: gl.constexpr,
    MIN_CHUNK: gl.constexpr, OVERHEAD: gl.constexpr,
):
    gl.static_assert(PAGE % BLOCK_N == 0, "a K/V box must lie in one page")
    gl.static_assert(Q_LEN * G <= BLOCK_M, "the packed rows must fit the 64-row tile")
    gl.static_assert(BLOCK_M == 64, "one consumer warpgroup owns the tile (wgmma M = 64)")
    # Persistent: grid min(SLOTS, B * Hkv * S) CTAs walk the call's items (module docstring); every CTA
    # computes the same chunk from kv_lens, as the merge kernel does.
    if BALANCE:
        min_chunk = _gl_balanced_chunk(kvl_ptr, n_seqs, HKV, BLOCK_N, BLOCK_B, SLOTS, MIN_CHUNK, OVERHEAD, 4)
    else:
        min_chunk = 0

    smem_layout: gl.constexpr = k_desc.layout
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, HEAD_D], smem_layout)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, HEAD_D], smem_layout)
    v_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, HEAD_D], smem_layout)
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)  # the loader's expect-tx arrival
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=1)  # the consumer warpgroup's arrival
        mbarrier.init(v_empty.index(s), count=1)
    fence_async_shared()  # barrier inits visible to the async proxy (TMA) before first use

    gl.warp_specialize([
        (_gl_consumer, (q_ptr, o_ptr, op_ptr, lsep_ptr, kvl_ptr, q_smem, k_smem, v_smem, k_ready, k_empty, v_ready,
                        v_empty, n_seqs, min_chunk, NUM_SPLITS, qk_scale,
                        stride_qt, stride_qh, stride_ot, stride_oh,
                        stride_opt, stride_oph, stride_ops, stride_lt, stride_lh,
                        Q_LEN, G, HKV, BLOCK_M, BLOCK_N, HEAD_D, STAGES, SPLIT, BLOCK_B)),
        (_gl_loader, (k_desc, v_desc, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, pt_ptr, kvl_ptr,
                      stride_pt, n_seqs, min_chunk, NUM_SPLITS, HKV, STAGES, BLOCK_N, PAGE, HEAD_D, BLOCK_B)),
    ], [1], [REGS_LOADER])


def _gl_smem_layout():
    # [64, 256] bf16 boxes: 512-byte rows, 128-byte swizzle (TMA splits the box into 64-column messages);
    # the Q tile and both rings use it (what TMA writes and wgmma reads).
    return gl.NVMMASharedLayout.get_default_for([_GL_BLOCK_N, _GL_HEAD_D], gl.bfloat16)


# Per-shape Gluon plans (as _PLANS for the Triton kernel): split count, grids, constexprs, scratch sizes.
_GL_PLANS = {}
# The last cache pair's Gluon descriptors, reused only for the very same tensors (as _LAST_DESCS).
_GL_DESCS = {}


def _gluon_plan(cfg, rows, hq, d, page, hkv, batch, table_cols, device, softmax_scale):
    """(scale * log2 e, S, persistent grid, merge grid (B*q_len, Hq), kernel kw, merge kw, scratch length,
    o-partial length, partial strides, plan number) for q [rows, hq, d], caches of pages of `page` tokens
    and hkv KV heads, page_table [batch, table_cols]."""
    key = (rows, hq, d, page, hkv, batch, table_cols, device, softmax_scale, tuple(cfg.items()))
    plan = _GL_PLANS.get(key)
    if plan is not None:
        return plan
    q_len = rows // batch
    g = hq // hkv
    if softmax_scale is None:
        softmax_scale = d ** -0.5
    # Upper bound on kv_len from the page table's width (no host sync on kv_lens), as the Triton path: S
    # sizes the partials; the kernel's chunk only ever lengthens the "target" one (fewer splits in use).
    splits = num_splits_for(batch, hkv, table_cols * page, cfg, _num_sms(device), _GL_BLOCK_N)
    # One CTA an SM (shared memory): the persistent grid and the balanced policy's slots are the SMs.
    slots = _num_sms(device)
    balance = dict(BALANCE=cfg.get("SPLIT_POLICY") == "balanced" and splits > 1,
                   BLOCK_B=max(128, triton.next_power_of_2(batch)), SLOTS=slots,
                   MIN_CHUNK=cfg["MIN_SPLIT_TOKENS"], OVERHEAD=cfg["SPLIT_OVERHEAD_TOKENS"])
    kw = dict(Q_LEN=q_len, G=g, HKV=hkv, PAGE=page, HEAD_D=d, BLOCK_M=_GL_BLOCK_M, BLOCK_N=_GL_BLOCK_N,
              STAGES=int(cfg["gluon_stages"]), SPLIT=splits > 1, REGS_LOADER=int(cfg["gluon_regs_load"]),
              **balance, num_warps=4)
    # The merge counts each sequence's splits with the split kernel's chunk (the same integers: blocks of 64,
    # the same slots) and skips a sequence of one split, whose o the split kernel wrote.
    merge_kw = dict(Q_LEN=q_len, HEAD_D=d, BLOCK_N=_GL_BLOCK_N, BLOCK_S=cfg["REDUCE_BLOCK_S"], HKV=hkv, **balance,
                    SKIP_ONE=True, num_warps=4)
    grid = (min(slots, batch * hkv * splits),)
    ws_len, n_o, part_strides = _partials(rows, hq, splits, d)  # the Triton kernels' layout
    if len(_GL_PLANS) >= _PLANS_MAX:
        _GL_PLANS.clear()
    _PLAN_COUNT[0] += 1
    plan = (float(softmax_scale) * _LOG2E, splits, grid, (rows, hq), kw, merge_kw, ws_len, n_o, part_strides,
            _PLAN_COUNT[0])
    _GL_PLANS[key] = plan
    return plan


def _gluon_descs(k_cache, v_cache):
    """TMA descriptors of both caches viewed as [num_pages * 128, Hkv * 256] with [64, 256] boxes."""
    ident = (id(k_cache), id(v_cache), k_cache.data_ptr(), v_cache.data_ptr(), tuple(k_cache.shape),
             tuple(k_cache.stride()), tuple(v_cache.stride()))
    hit = _GL_DESCS.get(ident)
    if hit is not None and hit[0] is k_cache and hit[1] is v_cache:
        return hit[2]
    pages, page, hkv, d = k_cache.shape
    layout = _gl_smem_layout()
    made = tuple(GluonTensorDescriptor(c.view(pages * page, hkv * d), [pages * page, hkv * d], [hkv * d, 1],
                                       [_GL_BLOCK_N, d], layout) for c in (k_cache, v_cache))
    _GL_DESCS.clear()
    _GL_DESCS[ident] = (k_cache, v_cache, made)
    return made


_GL_LAUNCH = _Launch(_fa4_decode_gluon_kernel)


def _gluon_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, cfg):
    """The op on the Gluon kernel (+ the Triton merge kernel with several splits).

    q [B * q_len, Hq, 256] bf16, k_cache / v_cache [num_pages, 128, Hkv, 256] bf16 (contiguous),
    page_table [B, max_pages] int32, kv_lens [B] int32 -> o [B * q_len, Hq, 256] bf16.
    Per call on the host: one plan lookup, one descriptor-cache check, one or two allocations (o; the
    partials), one or two launches. No host sync.
    """
    rows, hq, d = q.shape
    num_pages, page, hkv, dk = k_cache.shape
    batch = kv_lens.shape[0]
    scale, splits, grid, merge_grid, kw, merge_kw, ws_len, n_o, ps, plan_key = _gluon_plan(
        cfg, rows, hq, d, page, hkv, batch, page_table.shape[1], q.device, softmax_scale)
    o = torch.empty_like(q)
    k_desc, v_desc = _gluon_descs(k_cache, v_cache)
    o_part, lse_part = _scratch(o, splits, ws_len, n_o)
    so_t, so_h = o.stride(0), o.stride(1)
    _GL_LAUNCH(grid, plan_key, (
        q, k_desc, v_desc, o, page_table, kv_lens, o_part, lse_part,
        scale,
        q.stride(0), q.stride(1),
        so_t, so_h,
        page_table.stride(0),
        ps[0], ps[1], ps[2], ps[3], ps[4],
        batch, splits), kw)
    if splits > 1:
        _merge(merge_grid, plan_key, o_part, lse_part, o, kv_lens, ps, splits, merge_kw)
    return o

