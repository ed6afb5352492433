"""The Gluon kernel for Hopper (sm_90a): FlashAttention-3's design. The op's kernel on an sm_90 GPU for the
inputs it takes (entry.py says which); Triton's interpreter cannot run it.

Interface and causal alignment: entry.py (the op's contract, workloads/fa4_prefill.yaml).

Design (FlashAttention-3 forward, one CTA per (q tile of 128 tokens, q head)):
- Grid (Hq, T_total // 128 + N): tiles of all sequences share axis 1 without a host sync, as in the
  Triton kernel (triton_fwd.py): sequence s owns tiles [cu[s] // 128 + s, ...), a program finds its
  sequence by binary search over cu_seqlens_q, tiles run heaviest first, and surplus programs return
  before any shared memory or barrier is touched. CONFIG's gluon_grid "tile_fast" swaps the axes (the
  tiles of one head start together) and gluon_tile_order "in_order" runs the lightest tiles first: the
  search's points on the kernel's launch order (both compile alike, ptxas sm_90a offline; untimed).
- gl.warp_specialize, three partitions (12 warps, 384 threads):
    default (4 warps)  consumer warpgroup 0: query rows 0..63 of the tile
    worker  (4 warps)  consumer warpgroup 1: query rows 64..127
    worker  (1 warp)   loader: TMA for Q (two [64, 256] boxes) and for each 64-token page of K and
                       of V (one [64, 256] box each); it also reads the page table.
  Registers: 168 a thread at launch (65536 / 384); at the region's start setmaxnreg gives 240 to
  each consumer warpgroup and 24 to the loader's warpgroup (the loader warp and 3 idle ones):
  worker_num_regs = [REGS_CONSUMER, REGS_LOADER], Triton gives the default partition the same
  240. A consumer holds a [64, 256] fp32 accumulator (128 registers a thread) plus S, P and the
  softmax state. ptxas (Triton 3.6, sm_90a): no spills, 192.3 KB shared memory.
- Shared memory: Q [2, 64, 256] (64 KB), K ring [STAGES, 64, 256], V ring [STAGES, 64, 256]
  (32 KB a slot), all NVMMA 128-byte swizzled (what TMA writes and wgmma reads). STAGES = 2:
  192 KB; 3 would not fit the 227 KB of an H100/H200 CTA.
- The caches are TMA'd through 2-D descriptors over [num_pages * 64, Hkv * 256] (a page of one
  KV head is the box at [page * 64, kvh * 256]); Q through one over [T_total, Hq * 256] (rows past
  the sequence are loaded, zero-filled past T_total, and their outputs never stored).
- Barriers (mbarriers in shared memory), per ring slot: k_ready / v_ready (count 1: the loader's
  expect-tx arrival, completed by the TMA's bytes), k_empty / v_empty (count 2: each consumer
  warpgroup arrives once per use of the slot). q_ready[2] (count 1), one per consumer half. K and
  V have separate barriers so the next K can land while the PV product of this block still reads V.
  Iteration j of a program uses slot j % STAGES with parity (j // STAGES) & 1; the loader waits
  the empty barriers with the flipped parity, so its first pass over the ring does not block.
- Consumer, per 64-key block: S = Q K^T by warpgroup_mma, release K, online softmax in base 2
  (log2(e) folded into the scale) with fp32 row max / sum, P to bf16 in registers as the A operand
  (DotOperandLayout of O's wgmma layout), O += P V by warpgroup_mma, release V. Blocks every row of
  the warpgroup sees in full run in an unmasked loop; the causal diagonal band and the ragged end
  (keys >= kv_len) in a masked loop. FA3's intra-warpgroup overlap: S_j and P_{j-1} V_{j-1} are
  issued back to back and the softmax of S_j runs while the tensor cores do P_{j-1} V_{j-1} (ptxas
  still places that MMA's wait half-way through the softmax of unmasked blocks and before it in
  masked ones, see _step_overlap). Waiting for every MMA at once instead lost on each shape timed:
  1.12-1.24x against 1.18-1.38x over the Triton kernel (H100, 2026-12-05, docs/perf/fa4_prefill.md).
- NaN tails: rows of the last page past kv_len hold whatever the pool holds (NaN in the gate).
  Scores there are replaced by -inf (where, not multiplication). P = 0 is not enough for V
  (0 * NaN = NaN), so on the block that holds kv_len each consumer overwrites those V rows with 0
  in shared memory (load, where, store, fence.proxy.async, warpgroup barrier) before its PV MMA.
  Both consumers write the same values to the same slot; neither releases it until it is done.

Not done yet (candidates for the next versions):
- no ping-pong between the two consumer warpgroups (named barriers ordering one's softmax against
  the other's MMAs), FA3's second scheduling trick;
- not persistent (one CTA per tile), no GQA packing (a K/V page is loaded once per q head: a group of
  16 heads reads each page 16 times, through L2);
- the output is stored from the wgmma accumulator layout with masked pointer stores, not via
  shared memory + TMA;
- both consumers run every block the tile needs, so warpgroup 0 computes one fully masked block
  on the diagonal that only warpgroup 1 needs, and a tile with <= 64 valid rows runs warpgroup 1
  on padding rows;
- Q tile 128 only (BLOCK_M), page 64 == BLOCK_N, head dim 256 only; q and the caches must be
  contiguous (asserted): the caches are viewed as 2-D for TMA. The entry sends every other input to
  the Triton kernel (entry.py, _gluon_unfit).

Measured (H100 80GB HBM3, Triton 3.6.0, torch 2.11.0+cu130, 2026-12-05; docs/perf/fa4_prefill.md): the
gate passes on smoke, edge and all 30 full shapes (2 rounds, rel L2 1.1e-3 to 2.3e-3, as the Triton
kernel's); under graph replay 1.09-1.72x the shipped Triton kernel on every full shape (geomean 1.34x),
P8 12.1 ms (~730 TFLOP/s) against SDPA's (cuDNN) 13.6 ms. Those figures are of the same kernel as a
module of its own (kernels/fa4_prefill/gluon.py, since moved here unchanged but for names); as this stage
of the op's baseline, run by the entry on sm_90, it has not been re-measured yet.
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

from .common import _LOG2E, _PLAN_COUNT, _PLANS_MAX, _Launch

# The kernel's fixed tile: its tunables (ring slots, register split) are CONFIG's gluon_* keys (entry.py).
_BLOCK_M = 128  # query rows a CTA: two consumer warpgroups of 64
_HALF_M = 64  # query rows a consumer warpgroup (wgmma M = 64 per warpgroup)
_BLOCK_N = 64  # keys a block: one page
_PAGE = 64
_HEAD_D = 256


@gluon.jit
def _gluon_find_seq(cu_ptr, tile, N, TPT: gl.constexpr):
    # Largest s in [0, N) with cu[s] // TPT + s <= tile (the baseline's tile numbering).
    lo = 0
    hi = N
    while lo < hi:
        mid = (lo + hi) // 2
        start = gl.load(cu_ptr + mid) // TPT + mid
        if start <= tile:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@gluon.jit
def _loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem,
            q_ready, k_ready, k_empty, v_ready, v_empty,
            pt_row, q_row0, q_col, kv_col, n_blocks,
            STAGES: gl.constexpr, HALF_M: gl.constexpr, PAGE: gl.constexpr):
    # Q: one box per consumer half, each on its own barrier.
    for c in gl.static_range(2):
        mbarrier.expect(q_ready.index(c), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row0 + c * HALF_M, q_col], q_ready.index(c), q_smem.index(c))
    for j in range(n_blocks):
        slot = j % STAGES
        phase = (j // STAGES) & 1
        row = gl.load(pt_row + j) * PAGE  # BLOCK_N == PAGE: block j is page j of the sequence
        # phase ^ 1: the first pass over the ring passes at once (a fresh barrier's previous phase counts
        # as complete); later passes wait until both consumers released the slot.
        mbarrier.wait(k_empty.index(slot), phase ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [row, kv_col], k_ready.index(slot), k_smem.index(slot))
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [row, kv_col], v_ready.index(slot), v_smem.index(slot))


@gluon.jit
def _softmax_step(s, j, m_i, l_i, qpos, kv_len, qk_scale,
                  MASKED: gl.constexpr, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    # Online softmax of one score block, base 2 (log2(e) is in qk_scale). MASKED blocks: the causal diagonal
    # band and the ragged end (keys >= kv_len).
    if MASKED:
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        ok = (cols[None, :] <= qpos[:, None]) & (cols[None, :] < kv_len)
        s = gl.where(ok, s, float("-inf"))  # also drops NaN scores of the last page's tail rows
    # Scale folded into one FMA per score (s * scale - m).
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _zero_v_tail(v_buf, j, kv_len, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr):
    # The last page's rows past kv_len may hold NaN and 0 * NaN = NaN: zero them in shared memory. In column
    # chunks of 64 (16 registers a thread each): the whole [64, 256] block would need 64 registers beside the
    # 128 of the accumulator and spill.
    V_CHUNK: gl.constexpr = 64
    v_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])  # 16-byte vectors
    rows = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, v_layout))
    keep = (rows < kv_len)[:, None]
    for c in gl.static_range(HEAD_D // V_CHUNK):
        chunk = v_buf.slice(c * V_CHUNK, V_CHUNK, dim=1)
        v = chunk.load(v_layout)
        chunk.store(gl.where(keep, v, gl.zeros_like(v)))
    fence_async_shared()  # generic-proxy writes before the async-proxy (wgmma) read
    gl.thread_barrier()  # every warp of this warpgroup has written its part


@gluon.jit
def _step_overlap(j, acc, m_i, l_i, p, alpha, q, s_zero, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty,
                  qpos, kv_len, qk_scale,
                  MASKED: gl.constexpr, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
                  s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr):
    # Step j >= 1 of FA3's intra-warpgroup overlap: S_j = Q K_j^T and O = alpha_{j-1} O + P_{j-1} V_{j-1}
    # are issued back to back, and the softmax of S_j runs while the tensor cores still do P_{j-1} V_{j-1}.
    # P (fp32) and alpha come from the previous step. Why this order (read in SASS, ptxas of Triton 3.6):
    # - P is packed to bf16 here, before the PV issue, not at the end of the previous step: a loop-carried
    #   bf16 P sits in the registers the MMA in flight reads, so ptxas waits for that MMA before packing the
    #   new P, and its scheduler hoists that wait above most of the softmax;
    # - O is rescaled here for the same reason (it is the MMA's accumulator);
    # - no branch between the issue and the last wait (masked and unmasked steps are separate loops).
    # Even so ptxas places the last wait about half-way through the softmax's exp2s in the unmasked loop and
    # before them in the masked one (SASS, STAGES=2); releasing V one step later did not move it.
    slot = j % STAGES
    phase = (j // STAGES) & 1
    prev = (j - 1) % STAGES
    prev_phase = ((j - 1) // STAGES) & 1
    mbarrier.wait(k_ready.index(slot), phase)
    s_tok = warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    p_op = gl.convert_layout(p.to(gl.bfloat16), p_layout)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    # V_{j-1} never needs its tail zeroed here: only the last block can hold keys >= kv_len.
    mbarrier.wait(v_ready.index(prev), prev_phase)
    o_tok = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, ))  # wgmma groups retire in order: S_j is done
    mbarrier.arrive(k_empty.index(slot), count=1)
    p, m_i, l_i, alpha = _softmax_step(s, j, m_i, l_i, qpos, kv_len, qk_scale, MASKED, BLOCK_N, s_layout)
    # p_op is read from registers by the MMA in flight: kept alive through the wait.
    acc, p_op = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, p_op))
    mbarrier.arrive(v_empty.index(prev), count=1)
    return acc, m_i, l_i, p, alpha


@gluon.jit
def _mainloop_overlap(acc, m_i, l_i, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty,
                      qpos, kv_len, qk_scale, n_full, n_blocks,
                      STAGES: gl.constexpr, HALF_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
                      s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr):
    s_zero = gl.zeros([HALF_M, BLOCK_N], gl.float32, s_layout)
    # Block 0: nothing in flight yet, so the mask may be a runtime branch.
    mbarrier.wait(k_ready.index(0), 0)
    s_tok = warpgroup_mma(q, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, ))
    mbarrier.arrive(k_empty.index(0), count=1)
    if n_full == 0:
        p, m_i, l_i, alpha = _softmax_step(s, 0, m_i, l_i, qpos, kv_len, qk_scale, True, BLOCK_N, s_layout)
    else:
        p, m_i, l_i, alpha = _softmax_step(s, 0, m_i, l_i, qpos, kv_len, qk_scale, False, BLOCK_N, s_layout)
    for j in range(1, n_full):
        acc, m_i, l_i, p, alpha = _step_overlap(j, acc, m_i, l_i, p, alpha, q, s_zero, k_smem, v_smem, k_ready,
                                                k_empty, v_ready, v_empty, qpos, kv_len, qk_scale, False, STAGES,
                                                BLOCK_N, s_layout, o_layout, p_layout)
    for j in range(gl.maximum(n_full, 1), n_blocks):
        acc, m_i, l_i, p, alpha = _step_overlap(j, acc, m_i, l_i, p, alpha, q, s_zero, k_smem, v_smem, k_ready,
                                                k_empty, v_ready, v_empty, qpos, kv_len, qk_scale, True, STAGES,
                                                BLOCK_N, s_layout, o_layout, p_layout)
    # Last block's P V (the only block whose V can hold rows >= kv_len).
    last = n_blocks - 1
    slot = last % STAGES
    p_op = gl.convert_layout(p.to(gl.bfloat16), p_layout)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    mbarrier.wait(v_ready.index(slot), (last // STAGES) & 1)
    if n_blocks * BLOCK_N > kv_len:
        _zero_v_tail(v_smem.index(slot), last, kv_len, BLOCK_N, HEAD_D)
    o_tok = warpgroup_mma(p_op, v_smem.index(slot), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, ))
    mbarrier.arrive(v_empty.index(slot), count=1)
    return acc, l_i


@gluon.jit
def _consumer(C: gl.constexpr, q_smem, k_smem, v_smem, q_ready, k_ready, k_empty, v_ready, v_empty,
              o_ptr, stride_ot, stride_oh, q_start, q_len, tok0, prefix, kv_len, n_blocks, head, qk_scale,
              STAGES: gl.constexpr, HALF_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr):
    # wgmma layouts of one warpgroup (4 warps along M): S [64, 64] and O [64, 256]; P as O's A operand.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_l: gl.constexpr = gl.SliceLayout(1, s_layout)

    q = q_smem.index(C)
    qpos = prefix + tok0 + C * HALF_M + gl.arange(0, HALF_M, layout=row_l)
    m_i = gl.full([HALF_M], -1.0e30, gl.float32, row_l)  # finite: a fully masked row gives p = 0, not NaN
    l_i = gl.zeros([HALF_M], gl.float32, row_l)
    acc = gl.zeros([HALF_M, HEAD_D], gl.float32, o_layout)

    # Blocks every row of this warpgroup sees in full and that hold no key >= kv_len: no masks.
    first_q = prefix + tok0 + C * HALF_M
    n_full = gl.minimum(gl.minimum((first_q + 1) // BLOCK_N, kv_len // BLOCK_N), n_blocks)

    mbarrier.wait(q_ready.index(C), 0)
    acc, l_i = _mainloop_overlap(acc, m_i, l_i, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty,
                                 qpos, kv_len, qk_scale, n_full, n_blocks,
                                 STAGES, HALF_M, BLOCK_N, HEAD_D, s_layout, o_layout, p_layout)

    l_safe = gl.where(l_i > 0.0, l_i, 1.0)  # padding rows past q_len may see no key; never stored
    out = acc * gl.convert_layout(1.0 / l_safe, gl.SliceLayout(1, o_layout))[:, None]
    rows = tok0 + C * HALF_M + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, o_layout))
    cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, o_layout))
    offs = (q_start + rows).to(gl.int64) * stride_ot + head * stride_oh
    ptrs = o_ptr + offs[:, None] + cols[None, :]
    gl.store(ptrs, out.to(gl.bfloat16), mask=(rows < q_len)[:, None])


@gluon.jit
def _fa4_prefill_gluon_kernel(
    q_desc, k_desc, v_desc, o_ptr, pt_ptr, cu_ptr, kvl_ptr,
    qk_scale, N,
    stride_ot, stride_oh, stride_pt,
    G: gl.constexpr, PAGE: gl.constexpr, HEAD_D: gl.constexpr,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    REGS_CONSUMER: gl.constexpr, REGS_LOADER: gl.constexpr,
    HEAD_FAST: gl.constexpr = True, HEAVY_FIRST: gl.constexpr = True,
):
    HALF_M: gl.constexpr = BLOCK_M // 2
    gl.static_assert(BLOCK_N == PAGE, "a key block is one page")
    gl.static_assert(HALF_M == 64, "one consumer warpgroup owns 64 query rows (wgmma M)")
    # HEAD_FAST: grid (Hq, tiles), the heads of one tile start together (a KV head's G query heads read the
    # same pages, through L2); else (tiles, Hq), the tiles of one head together (they share the key prefix).
    if HEAD_FAST:
        head = gl.program_id(0)
        t_id = gl.program_id(1)
        n_tiles = gl.num_programs(1)
    else:
        head = gl.program_id(1)
        t_id = gl.program_id(0)
        n_tiles = gl.num_programs(0)
    # HEAVY_FIRST: the last tiles of a sequence (the most keys under the causal mask) start first, so the
    # light ones fill the last wave; else in order.
    if HEAVY_FIRST:
        tile = n_tiles - 1 - t_id
    else:
        tile = t_id

    s = _gluon_find_seq(cu_ptr, tile, N, BLOCK_M)
    q_start = gl.load(cu_ptr + s)
    q_len = gl.load(cu_ptr + s + 1) - q_start
    tok0 = (tile - (q_start // BLOCK_M + s)) * BLOCK_M
    if tok0 >= q_len:
        return  # surplus program: before any shared memory or barrier is allocated
    kv_len = gl.load(kvl_ptr + s)
    prefix = kv_len - q_len
    hi = prefix + gl.minimum(tok0 + BLOCK_M, q_len)  # keys the tile's last valid row needs (>= 1)
    n_blocks = (hi + BLOCK_N - 1) // BLOCK_N
    kvh = head // G

    q_layout: gl.constexpr = q_desc.layout
    kv_layout: gl.constexpr = k_desc.layout
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [2, HALF_M, HEAD_D], q_layout)
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, HEAD_D], kv_layout)
    v_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, HEAD_D], kv_layout)
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    q_ready = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    for i in gl.static_range(2):
        mbarrier.init(q_ready.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # one arrival per consumer warpgroup
        mbarrier.init(v_empty.index(i), count=2)
    fence_async_shared()  # barrier inits visible to the async proxy (TMA) before first use

    pt_row = pt_ptr + s.to(gl.int64) * stride_pt
    q_row0 = q_start + tok0
    gl.warp_specialize([
        (_consumer, (0, q_smem, k_smem, v_smem, q_ready, k_ready, k_empty, v_ready, v_empty,
                     o_ptr, stride_ot, stride_oh, q_start, q_len, tok0, prefix, kv_len, n_blocks, head, qk_scale,
                     STAGES, HALF_M, BLOCK_N, HEAD_D)),
        (_consumer, (1, q_smem, k_smem, v_smem, q_ready, k_ready, k_empty, v_ready, v_empty,
                     o_ptr, stride_ot, stride_oh, q_start, q_len, tok0, prefix, kv_len, n_blocks, head, qk_scale,
                     STAGES, HALF_M, BLOCK_N, HEAD_D)),
        (_loader, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, k_ready, k_empty, v_ready, v_empty,
                   pt_row, q_row0, head * HEAD_D, kvh * HEAD_D, n_blocks, STAGES, HALF_M, PAGE)),
    ], [4, 1], [REGS_CONSUMER, REGS_LOADER])


# Host-side state reused across calls (built once, looked up by plain Python keys):
# - _GLUON_PLANS: per shape and CONFIG: grid, constexprs, scale.
# - _GLUON_DESCS: the last (q, k_cache, v_cache) descriptors, reused only for the very same tensor objects
#   with the same data pointers, shapes and strides (a TensorDescriptor holds its base tensor).
_GLUON_PLANS = {}
_GLUON_DESCS = {}  # "q" / "kv" -> (tensors, key, descriptors)


def _smem_layout():
    # [64, 256] bf16 boxes: 512-byte rows, 128-byte swizzle (TMA splits the box into 64-column messages).
    return gl.NVMMASharedLayout.get_default_for([_HALF_M, _HEAD_D], gl.bfloat16)


def _cached_q_desc(q):
    key = (q.data_ptr(), q.shape, q.stride())
    hit = _GLUON_DESCS.get("q")
    if hit is not None and hit[0] is q and hit[1] == key:
        return hit[2]
    t, hq, d = q.shape
    flat = q.view(t, hq * d)
    desc = TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [_HALF_M, d], _smem_layout())
    _GLUON_DESCS["q"] = (q, key, desc)
    return desc


def _cached_kv_descs(k_cache, v_cache):
    key = (k_cache.data_ptr(), v_cache.data_ptr(), k_cache.shape, v_cache.shape, k_cache.stride(), v_cache.stride())
    hit = _GLUON_DESCS.get("kv")
    if hit is not None and hit[0][0] is k_cache and hit[0][1] is v_cache and hit[1] == key:
        return hit[2]
    num_pages, page, hkv, d = k_cache.shape
    descs = []
    for c in (k_cache, v_cache):
        flat = c.view(num_pages * page, hkv * d)
        descs.append(TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [_BLOCK_N, d], _smem_layout()))
    _GLUON_DESCS["kv"] = ((k_cache, v_cache), key, tuple(descs))
    return descs[0], descs[1]


def _gluon_plan(cfg, t_total, hq, d, page, hkv, n, softmax_scale, device):
    key = (t_total, hq, d, page, hkv, n, softmax_scale, device, tuple(cfg.items()))
    plan = _GLUON_PLANS.get(key)
    if plan is not None:
        return plan
    if softmax_scale is None:
        softmax_scale = d ** -0.5
    # Upper bound on tiles from shapes alone (no host sync): sum_s cdiv(q_len_s, 128) <= T // 128 + N.
    tiles = t_total // _BLOCK_M + n
    head_fast = cfg.get("gluon_grid", "head_fast") == "head_fast"
    grid = (hq, tiles) if head_fast else (tiles, hq)
    kw = dict(G=hq // hkv, PAGE=page, HEAD_D=d, BLOCK_M=_BLOCK_M, BLOCK_N=_BLOCK_N, STAGES=int(cfg["gluon_stages"]),
              REGS_CONSUMER=int(cfg["gluon_regs"]), REGS_LOADER=int(cfg["gluon_regs_load"]),
              HEAD_FAST=head_fast, HEAVY_FIRST=cfg.get("gluon_tile_order", "heavy_first") == "heavy_first",
              num_warps=4)
    if len(_GLUON_PLANS) >= _PLANS_MAX:
        _GLUON_PLANS.clear()
    _PLAN_COUNT[0] += 1
    plan = (float(softmax_scale) * _LOG2E, grid, kw, _PLAN_COUNT[0])
    _GLUON_PLANS[key] = plan
    return plan


_GLUON_LAUNCH = _Launch(_fa4_prefill_gluon_kernel)


def _gluon_forward(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale, cfg):
    """The op on the Gluon kernel: the entry's arguments and the CONFIG to use; returns o like q.

    Per call on the host: one plan lookup, two descriptor-cache checks, one allocation (o), one
    launch. No host sync: the grid is an upper bound from shapes.
    """
    t_total, hq, d = q.shape
    num_pages, page, hkv, dk = k_cache.shape
    assert d == dk == _HEAD_D and page == _PAGE and v_cache.shape == k_cache.shape and hq % hkv == 0
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and q.is_contiguous()
    n = kv_lens.shape[0]
    scale, grid, kw, plan_key = _gluon_plan(cfg, t_total, hq, d, page, hkv, n, softmax_scale, q.device)
    o = torch.empty_like(q)
    if t_total == 0:
        return o
    q_desc = _cached_q_desc(q)
    k_desc, v_desc = _cached_kv_descs(k_cache, v_cache)
    _GLUON_LAUNCH(grid, plan_key, (
        q_desc, k_desc, v_desc, o, page_table, cu_seqlens_q, kv_lens,
        scale, n,
        o.stride(0), o.stride(1), page_table.stride(0)), kw)
    return o
