"""Paged FlashAttention decode (head dim 256, q_len 1 or 4): a warp-specialised Gluon split-KV kernel for
Hopper (sm_90a), with the fa4_decode baseline's Triton kernel as the fallback everywhere else.

A candidate, not the op's kernel: the offline search proposes it on sm_90 GPUs (the split_gluon pattern,
kernels/fa4_decode/patterns/, searching gluon_stages and the split knobs). Its first form, one CTA per
(sequence, KV head, split), passed the gate on smoke and edge on an H100 (2026-12-06, Triton 3.6.0, torch
2.11.0+cu130; 13/13, 2 rounds) and ran 1.03x the baseline geomean over the 20 full shapes under graph replay
(0.96-1.08x at q_len 1, 1.03-1.20x at q_len 4; docs/perf/fa4_decode.md). The persistent form below replaced
it (ptxas for sm_90a offline: no spills); on a GPU it has only matched its Triton kernel on smoke case S1
(H100, 2026-12-07; one split a sequence, o written by this kernel): the merge path is unchecked there, nothing timed.
The Triton path is the baseline's code unchanged (kernels/fa4_decode/baseline.py), checked in Triton's interpreter
(tests/kernels/test_fa4_decode_gluon.py);
scripts/device/fa4_decode_gluon_compile.py compiles the Gluon kernel offline for sm_90a.

Interface (workloads/fa4_decode.yaml):
    q          [B * q_len, Hq, 256]          bf16, q_len in {1, 4} (= q rows // B)
    k_cache    [num_pages, 128, Hkv, 256]    bf16, NHD pages
    v_cache    [num_pages, 128, Hkv, 256]    bf16
    page_table [B, max_pages]                int32 page ids (slots past a sequence's pages: anything)
    kv_lens    [B]                           int32, includes the q_len new tokens
    -> o       [B * q_len, Hq, 256]          bf16

Draft j of q_len sees keys 0..kv_len - q_len + j (bottom-right causal among the drafts).

Which kernel runs a call, CONFIG["kernel"] (as kernels/fa4_prefill/stages/entry.py decides):
  "auto"    (default) the Gluon kernel when the tensors are on an NVIDIA GPU of capability (9, 0) (the name
            guards against ROCm's gfx90a, also (9, 0)), the module is not run by Triton's interpreter, and the
            call is one the Gluon kernel takes: bf16 q and caches, head dim 256, pages of 128, int32
            page_table and kv_lens, q_len * G <= 64 (G = Hq / Hkv), q and both caches contiguous and 16-byte
            aligned (TMA views the caches as 2-D). The Triton kernel everywhere else.
  "triton"  always the Triton kernel (the baseline's code and CONFIG keys, unchanged).
  "gluon"   always the Gluon kernel; a call it cannot take is a ValueError saying why, before any launch.
Any other value is a ValueError before any launch. The device is asked once per device index (_SM90),
the shapes and dtypes once per key (_ROUTES); contiguity and alignment are read every call.

Gluon kernel design (_fa4_decode_gluon_kernel; flash-decoding, memory-bound):
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

Triton kernel design (the baseline's; fallback): one program per (sequence, KV head, split) whose M tile
packs q_len x G rows (>= 16), split-KV with fp32 partials and a merge kernel, K/V as TMA boxes through
tensor descriptors; see kernels/fa4_decode/baseline.py's docstring for its measurements and options
(LAZY_RESCALE, FUSED_MERGE, the split policies).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
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

from aka.launch import Launcher

# Values used at call time (the entry reads the module global each call, so a search can swap it).
CONFIG = {
    # which kernel runs a call: "auto", "triton" or "gluon" (module docstring)
    "kernel": "auto",
    # The Gluon kernel's K and V ring slots (32 KB each per ring, beside Q's 32 KB): 2 -> 160 KB of shared
    # memory, 3 -> 224 KB (both fit a CTA's 227 KB; 4 would not). 2 ships: with one CTA an SM it keeps up
    # to 128 KB of K/V in flight, several times an SM's share of HBM bandwidth x latency; 3 is untimed.
    "gluon_stages": 2,
    # setmaxnreg of the loader warp's warpgroup: the item table (five vectors over B <= 128 sequences, four
    # lanes a thread in one warp), the loop counters. ptxas (Triton 3.6.0, sm_90a, offline, G 16 / q_len 1 and
    # 4, G 8 / q_len 4, STAGES 2 and 3): 255 registers a thread at launch over 8 warps (the consumer warpgroup,
    # the loader warp, 3 idle warps), 256 for the consumer; 24 for the loader spilled 16-24 bytes, 48 none.
    # Shared memory 160.2 KB (STAGES 2) / 224.3 KB (3).
    "gluon_regs_load": 48,
    # The Triton kernel's values below are the baseline's (kernels/fa4_decode/baseline.py); the Gluon
    # kernel shares the split policy (SPLIT_TARGET, MIN_SPLIT_TOKENS, MAX_SPLITS, SPLIT_POLICY "target" or
    # "waves", CTAS_PER_SM, SPLIT_OVERHEAD_TOKENS) and the merge's REDUCE_BLOCK_S.
    # Tiles with < 64 packed rows (q_len 1: M = G = 8 or 16). H200 sweep 2026-12-02 (graph replay, six
    # shapes of >= 537 MB): TMA boxes with BN 64 / 2 stages best (mean 72.0% of the floor vs 70.3% for
    # the pointer gather at BN 32 / 3 stages; 255 regs, 0 spills, 109 KB smem).
    "BLOCK_N": 64,
    "num_warps": 4,
    "num_stages": 2,
    # Tiles with >= 64 packed rows (q_len 4 x G 16): more compute per byte, registers are the limit.
    # Same sweep: with TMA, 2 stages beat 3 by 3-5% (207.9 / 247.4 / 668.6 vs 214.8 / 261.0 / 705.0 us).
    "BLOCK_N_m64": 32,
    "num_warps_m64": 4,
    "num_stages_m64": 2,
    # Skip the accumulator rescale until the running max grows by > 2^8. Run 3 (with BN 64 / 2 stages):
    # -10..+3% time on the six sweep shapes, mostly faster but within the ~5% run-to-run spread;
    # BN 32 / 3 stages + lazy was not measured, so it stays off.
    "LAZY_RESCALE": False,
    "SPLIT_TARGET": 1056,  # "target" policy: programs wanted (8 per SM); 264 / 528 / 2112 and "waves" were slower
    "MIN_SPLIT_TOKENS": 256,  # no split shorter than this (keeps the merge traffic small)
    "MAX_SPLITS": 256,
    "REDUCE_BLOCK_S": 16,  # splits merged per step in the reduction kernel
    # "target": cdiv(SPLIT_TARGET, B*Hkv); "waves": wave-quantisation model; "balanced": at most the
    # "target" count, chunks sized in the kernel from the real kv_lens (module docstring)
    "SPLIT_POLICY": "target",
    "CTAS_PER_SM": 2,  # "waves" and "balanced" on the Triton kernel: programs resident per SM (Gluon: the SMs)
    "SPLIT_OVERHEAD_TOKENS": 256,  # "waves" and "balanced" policies: fixed cost of a program, in keys
    # K/V blocks through TMA descriptors instead of per-key pointer gathers (module docstring)
    "USE_TMA": True,
    # split-KV merge inside the split kernel (module docstring): one launch instead of two. Correct on
    # the H200 but slower (2026-12-02, graph: D2-q4 557.9 vs 214.8 us, mean 53.8% of the floor vs
    # 70.3%): the last program of each tile merges alone while the SMs idle, and the counter atomics
    # order every split's stores.
    "FUSED_MERGE": False,
}

# Name -> values that compile and pass: the Triton kernel's interpreter-checked (device-checked by
# scripts/bench_fa4_decode.py); the Gluon kernel's fixed by shared memory and registers (module docstring).
SPACE = {
    "kernel": ["auto", "triton", "gluon"],
    "gluon_stages": [2, 3],  # both compile without spills (scripts/device/fa4_decode_gluon_compile.py)
    "gluon_regs_load": [48],
    "BLOCK_N": [16, 32, 64, 128],
    "num_warps": [4, 8],
    "num_stages": [1, 2, 3, 4],
    "BLOCK_N_m64": [16, 32, 64],
    "num_warps_m64": [4, 8],
    "num_stages_m64": [1, 2, 3, 4],
    "LAZY_RESCALE": [False, True],
    "SPLIT_TARGET": [132, 264, 528, 1056, 2112],
    "MIN_SPLIT_TOKENS": [128, 256, 512, 1024],
    "MAX_SPLITS": [64, 256],
    "REDUCE_BLOCK_S": [8, 16, 32],
    "SPLIT_POLICY": ["target", "waves", "balanced"],
    "CTAS_PER_SM": [1, 2, 3],
    "SPLIT_OVERHEAD_TOKENS": [0, 256, 1024],
    "USE_TMA": [False, True],
    "FUSED_MERGE": [False, True],
}


_LOG2E = 1.4426950408889634


@triton.jit
def _split_chunk(KVL, kv_len, n_seqs, n_heads, NUM_SPLITS, BLOCK_N: tl.constexpr, BALANCE: tl.constexpr,
                 BLOCK_B: tl.constexpr, SLOTS: tl.constexpr, MIN_CHUNK: tl.constexpr, OVERHEAD: tl.constexpr):
    """Keys per split program of a sequence of kv_len keys: cdiv(kv_len, NUM_SPLITS) rounded up to
    BLOCK_N, so at most NUM_SPLITS programs (the partials' size). BALANCE: at least the chunk c that
    minimises waves(c) x (c + OVERHEAD), waves(c) = cdiv(n_heads * sum_b cdiv(kv_len_b, c), SLOTS)
    (n_heads: KV heads, one program each), over two grids: the fair share f = cdiv(n_heads * total,
    SLOTS) times 1 + k/8 (k = 0..8), and the longest sequence cut evenly, cdiv(max_len, k0 - j) with
    k0 = cdiv(max_len, f) (j = 0..7), each rounded up to BLOCK_N; the first of equal costs wins.
    Every program (and the merge) reads the same kv_lens, so all compute the same c. Pure arithmetic
    on B <= BLOCK_B loaded lengths."""
    chunk = tl.cdiv(tl.cdiv(kv_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
    if BALANCE:
        offs_b = tl.arange(0, BLOCK_B)
        lens = tl.load(KVL + offs_b, mask=offs_b < n_seqs, other=0)
        fair = tl.maximum(tl.cdiv(n_heads * tl.sum(lens, 0), SLOTS), MIN_CHUNK)
        fair = tl.cdiv(fair, BLOCK_N) * BLOCK_N
        best_c = fair
        best_cost = _waves_cost(lens, fair, n_heads, SLOTS, OVERHEAD)
        for k in tl.static_range(1, 9):  # c = fair * (1 + k/8), rounded up to BLOCK_N
            c = tl.cdiv(fair * (8 + k) // 8, BLOCK_N) * BLOCK_N
            cost = _waves_cost(lens, c, n_heads, SLOTS, OVERHEAD)
            best_c, best_cost = tl.where(cost < best_cost, c, best_c), tl.minimum(cost, best_cost)
        # the longest sequence in k0 - j equal programs: on uniform batches exactly one full wave
        longest = tl.max(lens, 0)
        k0 = tl.cdiv(longest, fair)
        for j in tl.static_range(0, 8):
            c = tl.cdiv(tl.cdiv(longest, tl.maximum(k0 - j, 1)), BLOCK_N) * BLOCK_N
            cost = _waves_cost(lens, c, n_heads, SLOTS, OVERHEAD)
            best_c, best_cost = tl.where(cost < best_cost, c, best_c), tl.minimum(cost, best_cost)
        chunk = tl.maximum(chunk, best_c)
    return chunk


@triton.jit
def _waves_cost(lens, c, n_heads, SLOTS: tl.constexpr, OVERHEAD: tl.constexpr):
    """waves(c) x (c + OVERHEAD): the waves of programs chunk c makes, times one program's cost in keys."""
    return tl.cdiv(n_heads * tl.sum(tl.cdiv(lens, c), 0), SLOTS) * (c + OVERHEAD)


@triton.jit
def _fa4_decode_kernel(
    Q, K, V, O, PT, KVL, OP, LSEP, CNT,
    k_desc, v_desc,
    qk_scale,
    stride_qt, stride_qh,
    stride_kp, stride_ks, stride_kh,
    stride_vp, stride_vs, stride_vh,
    stride_ot, stride_oh,
    stride_pt,
    stride_opt, stride_oph, stride_ops,  # partial o  [B*q_len, Hq, S, D]
    stride_lt, stride_lh,  # partial lse [B*q_len, Hq, S]
    NUM_SPLITS,
    Q_LEN: tl.constexpr, G: tl.constexpr, PAGE: tl.constexpr, HEAD_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, LAZY_RESCALE: tl.constexpr,
    USE_TMA: tl.constexpr, FUSED_MERGE: tl.constexpr,
    BALANCE: tl.constexpr = False, BLOCK_B: tl.constexpr = 1, SLOTS: tl.constexpr = 1, MIN_CHUNK: tl.constexpr = 0,
    OVERHEAD: tl.constexpr = 0,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)

    kv_len = tl.load(KVL + b)
    chunk = _split_chunk(KVL, kv_len, tl.num_programs(0), tl.num_programs(1), NUM_SPLITS, BLOCK_N, BALANCE, BLOCK_B,
                         SLOTS, MIN_CHUNK, OVERHEAD)
    n_start = split * chunk
    n_end = tl.minimum(n_start + chunk, kv_len)
    if SPLIT:
        if n_start >= kv_len:
            return  # empty split: the merge only reads the cdiv(kv_len, chunk) non-empty ones

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    offs_nb = tl.arange(0, BLOCK_N)
    j = offs_m // G  # draft token
    head = kvh * G + offs_m % G
    row_ok = offs_m < Q_LEN * G
    qrow = b * Q_LEN + j
    qpos = kv_len - Q_LEN + j

    q = tl.load(Q + (qrow.to(tl.int64) * stride_qt + head * stride_qh)[:, None] + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)

    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - 1.0e30  # finite: an all-masked row gives p = 0
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)
    pt_row = PT + b.to(tl.int64) * stride_pt
    k_off = kvh * stride_kh
    v_off = kvh * stride_vh

    for n0 in range(n_start, n_end, BLOCK_N):
        offs_n = n0 + offs_nb
        n_ok = offs_n < n_end
        if USE_TMA:  # n0 and chunk are multiples of BLOCK_N, PAGE too: the box lies in one page
            row = tl.load(pt_row + n0 // PAGE).to(tl.int32) * PAGE + n0 % PAGE
            k = k_desc.load([row, kvh * HEAD_D])
            # rows past n_end: the next split's keys or a page tail that may hold NaN; the scores
            # are masked below, but 0 * NaN in P V is not, so V's are zeroed
            v = tl.where(n_ok[:, None], v_desc.load([row, kvh * HEAD_D]), 0.0)
        else:
            page = tl.load(pt_row + offs_n // PAGE, mask=n_ok, other=0).to(tl.int64)
            k = tl.load(K + (page * stride_kp + (offs_n % PAGE) * stride_ks + k_off)[:, None] + offs_d[None, :],
                        mask=n_ok[:, None], other=0.0)
            v = tl.load(V + (page * stride_vp + (offs_n % PAGE) * stride_vs + v_off)[:, None] + offs_d[None, :],
                        mask=n_ok[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k))
        qk = tl.where((offs_n[None, :] <= qpos[:, None]) & n_ok[None, :], qk, float("-inf"))
        m_blk = tl.max(qk, 1) * qk_scale
        if LAZY_RESCALE:
            # Keep a stale running max until some row's max grows by more than 8 (log2 units):
            # meanwhile p <= 2^8 and the final division by l is exact; the rescale of the
            # 64 x 256 accumulator is skipped on most steps once the max has settled.
            if tl.max(m_blk - m_i, 0) > 8.0:
                m_new = tl.maximum(m_i, m_blk)
                alpha = tl.math.exp2(m_i - m_new)
                l_i = l_i * alpha
                acc = acc * alpha[:, None]
                m_i = m_new
            p = tl.math.exp2(qk * qk_scale - m_i[:, None])
            l_i = l_i + tl.sum(p, 1)
            acc = tl.dot(p.to(v.dtype), v, acc)
        else:
            m_new = tl.maximum(m_i, m_blk)
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])  # scale folded into one FMA
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            acc = tl.dot(p.to(v.dtype), v, acc)
            m_i = m_new

    has = l_i > 0.0  # a draft row can see no key of a late split
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    if not SPLIT:
        tl.store(O + (qrow.to(tl.int64) * stride_ot + head * stride_oh)[:, None] + offs_d[None, :],
                 out.to(O.dtype.element_ty), mask=row_ok[:, None])
    else:
        lse = tl.where(has, m_i + tl.math.log2(tl.where(has, l_i, 1.0)), float("-inf"))
        base = qrow.to(tl.int64) * stride_opt + head * stride_oph + split * stride_ops
        tl.store(OP + base[:, None] + offs_d[None, :], out, mask=row_ok[:, None])
        tl.store(LSEP + qrow.to(tl.int64) * stride_lt + head * stride_lh + split, lse, mask=row_ok)
        if FUSED_MERGE:
            # every thread's partial stores happen before the count (barrier, then a release at gpu
            # scope); the program that counts last sees them all (acquire) and merges the tile
            tl.debug_barrier()
            ticket = tl.atomic_add(CNT + b * tl.num_programs(1) + kvh, 1, sem="acq_rel", scope="gpu")
            if ticket == tl.cdiv(kv_len, chunk) - 1:
                _merge_tile(OP, LSEP, O, qrow, head, row_ok, tl.cdiv(kv_len, chunk), stride_opt, stride_oph,
                            stride_ops, stride_lt, stride_lh, stride_ot, stride_oh, BLOCK_M, HEAD_D)


@triton.jit
def _merge_tile(OP, LSEP, O, qrow, head, row_ok, n_splits, stride_opt, stride_oph, stride_ops, stride_lt,
                stride_lh, stride_ot, stride_oh, BLOCK_M: tl.constexpr, HEAD_D: tl.constexpr):
    """FUSED_MERGE: o of one (sequence, KV head) tile from its n_splits partials, one split at a time
    by running max / sum-exp (as _fa4_decode_merge_kernel does per row), over column blocks of at
    most 2048 / BLOCK_M (a 64-row tile merged whole: 255 regs + 936 B spill; at 2048: 238 regs, no
    spill with USE_TMA, ptxas sm_90, Triton 3.9);
    loads bypass L1 (.cg), where lines of another SM's writes could be stale."""
    DC: tl.constexpr = HEAD_D if BLOCK_M * HEAD_D <= 2048 else 2048 // BLOCK_M
    lse_row = LSEP + qrow.to(tl.int64) * stride_lt + head * stride_lh
    op_row = OP + qrow.to(tl.int64) * stride_opt + head * stride_oph
    o_row = O + qrow.to(tl.int64) * stride_ot + head * stride_oh
    for d0 in tl.static_range(0, HEAD_D, DC):
        offs_d = d0 + tl.arange(0, DC)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        w_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, DC], dtype=tl.float32)
        for s in range(0, n_splits):
            lse = tl.load(lse_row + s, mask=row_ok, other=0.0, cache_modifier=".cg")
            m_new = tl.maximum(m, lse)  # split 0 holds keys for every row: finite from the first step
            w = tl.math.exp2(lse - m_new)
            alpha = tl.math.exp2(m - m_new)
            o = tl.load(op_row[:, None] + s * stride_ops + offs_d[None, :], mask=row_ok[:, None], other=0.0,
                        cache_modifier=".cg")
            acc = acc * alpha[:, None] + w[:, None] * o
            w_sum = w_sum * alpha + w
            m = m_new
        out = acc / tl.where(row_ok, w_sum, 1.0)[:, None]
        tl.store(o_row[:, None] + offs_d[None, :], out.to(O.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _fa4_decode_merge_kernel(
    OP, LSEP, O, KVL,
    stride_opt, stride_oph, stride_ops,
    stride_lt, stride_lh,
    stride_ot, stride_oh,
    NUM_SPLITS,
    Q_LEN: tl.constexpr, HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr,
    BALANCE: tl.constexpr = False, BLOCK_B: tl.constexpr = 1, HKV: tl.constexpr = 1, SLOTS: tl.constexpr = 1,
    MIN_CHUNK: tl.constexpr = 0, OVERHEAD: tl.constexpr = 0, SKIP_ONE: tl.constexpr = False,
):
    # SKIP_ONE (the Gluon split kernel): a sequence of one split wrote o itself, there is nothing to merge.
    row = tl.program_id(0)  # b * Q_LEN + j
    h = tl.program_id(1)
    kv_len = tl.load(KVL + row // Q_LEN)
    chunk = _split_chunk(KVL, kv_len, tl.num_programs(0) // Q_LEN, HKV, NUM_SPLITS, BLOCK_N, BALANCE, BLOCK_B,
                         SLOTS, MIN_CHUNK, OVERHEAD)
    n_splits = tl.cdiv(kv_len, chunk)  # non-empty splits (same formula as the split kernel)
    if SKIP_ONE:
        if n_splits == 1:
            return

    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_D)
    lse_row = LSEP + row.to(tl.int64) * stride_lt + h * stride_lh
    op_row = OP + row.to(tl.int64) * stride_opt + h * stride_oph
    m = tl.full([1], float("-inf"), tl.float32)
    w_sum = tl.zeros([1], dtype=tl.float32)
    acc = tl.zeros([HEAD_D], dtype=tl.float32)
    for s0 in range(0, n_splits, BLOCK_S):
        s = s0 + offs_s
        s_ok = s < n_splits
        lse = tl.load(lse_row + s, mask=s_ok, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(lse, 0))  # split 0 always holds keys, so m_new is finite
        w = tl.math.exp2(lse - m_new)
        alpha = tl.math.exp2(m - m_new)
        o = tl.load(op_row + (s * stride_ops)[:, None] + offs_d[None, :], mask=s_ok[:, None], other=0.0)
        acc = acc * alpha + tl.sum(w[:, None] * o, 0)
        w_sum = w_sum * alpha + tl.sum(w, 0)
        m = m_new
    out = acc / w_sum
    tl.store(O + row.to(tl.int64) * stride_ot + h * stride_oh + offs_d, out.to(O.dtype.element_ty))


def _arg_key(a, _tensor=torch.Tensor):
    """What Triton specialises a compiled kernel on, per argument, or more: a tensor's dtype and
    16-byte alignment, an int's exact value (Triton keys on == 1, % 16 and the int width), a float's
    or bool's type and value, a descriptor's dtype, alignment, shape, strides and box. The device is
    in the plan key. Same key -> the same compiled code applies. Cheap on purpose (~0.3 us a tensor):
    it runs for every argument of every launch."""
    t = type(a)
    if t is int:
        return a
    if isinstance(a, _tensor):
        return (a.dtype, a.data_ptr() & 15)
    if t is float or t is bool:
        return (t, a)
    base = a.base  # a host TensorDescriptor
    return (base.dtype, base.data_ptr() & 15, *a.shape, *a.strides, *a.block_shape)


class _Launch:
    """Launches one kernel through aka.launch's Launcher (the first call of a key through Triton's JIT,
    later ones through Triton's C launcher with the stream lookup, launch metadata and each descriptor's
    tensor map kept: 6-11 us of host less a call than Triton's compiled runner for the op's Triton kernels on
    an H100, 2026-12-07, docs/perf/host.md), keyed by the plan (constexprs, warps, stages) and every
    argument's _arg_key, so a call Triton would compile differently never reuses the wrong code. The
    interpreter compiles nothing: there every call takes the JIT path."""

    def __init__(self, fn):
        self.fn = fn
        self.kept = Launcher(fn)
        self.hits = self.kept.hits  # key -> the compiled kernel's kept launch

    def __call__(self, grid, plan_key, args, kw):
        self.kept(grid, args, kw, (plan_key, tuple(map(_arg_key, args))))


def num_splits_for(batch, hkv, max_kv, cfg=None, num_sms=132, block_n=None):
    """Split count from shapes only (max_kv is the page table's capacity, an upper bound).

    "target": fill SPLIT_TARGET programs. "waves": minimise waves x (keys per split + a fixed
    per-program cost), so that B*Hkv*S does not spill a few programs into an extra wave.
    Either way at least MIN_SPLIT_TOKENS keys per split and at most MAX_SPLITS splits.
    """
    cfg = CONFIG if cfg is None else cfg
    block_n = cfg["BLOCK_N"] if block_n is None else block_n
    cap = max(1, min(triton.cdiv(max_kv, max(cfg["MIN_SPLIT_TOKENS"], block_n)), cfg["MAX_SPLITS"]))
    if cfg.get("SPLIT_POLICY", "target") == "waves":
        return _waves_splits(batch * hkv, max_kv, cap, num_sms * cfg["CTAS_PER_SM"], cfg["SPLIT_OVERHEAD_TOKENS"])
    # "target", and "balanced" whose kernels only ever lengthen the chunk (fewer splits in use)
    want = triton.cdiv(cfg["SPLIT_TARGET"], batch * hkv)
    return max(1, min(want, cap))


@functools.lru_cache(maxsize=1024)
def _waves_splits(base, max_kv, cap, slots, overhead):
    best_cost, best_s = None, 1
    for s in range(1, cap + 1):
        cost = triton.cdiv(base * s, slots) * (triton.cdiv(max_kv, s) + overhead)
        if best_cost is None or cost < best_cost:
            best_cost, best_s = cost, s
    return best_s


@functools.lru_cache(maxsize=16)
def _num_sms(device):
    if device.type != "cuda":
        return 132  # interpreter runs: an H200's count
    return torch.cuda.get_device_properties(device).multi_processor_count


# Per-shape launch plans: everything the call derives from shapes, the CONFIG values and the
# scale (block sizes, split count, grids, constexprs) is computed once and looked up by a key of
# plain Python values, so a repeated eager call does no split-policy arithmetic and builds no
# kwargs dict. The key holds CONFIG's items, so a search that swaps or edits CONFIG gets a new plan.
_PLANS = {}
_PLANS_MAX = 256  # a server sees few distinct shapes; a sweep that sees more just starts over
_PLAN_COUNT = [0]  # plans built so far: a plan's number, never reused (the launch cache keys on it)


def _plan(cfg, rows, hq, d, page, hkv, batch, table_cols, device, softmax_scale, contiguous=True):
    key = (rows, hq, d, page, hkv, batch, table_cols, device, softmax_scale, contiguous, tuple(cfg.items()))
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    assert rows % batch == 0
    q_len = rows // batch
    g = hq // hkv
    if softmax_scale is None:
        softmax_scale = d ** -0.5
    block_m = max(16, triton.next_power_of_2(q_len * g))
    sfx = "_m64" if block_m >= 64 else ""
    block_n, num_warps, num_stages = cfg["BLOCK_N" + sfx], cfg["num_warps" + sfx], cfg["num_stages" + sfx]
    # Upper bound on kv_len from the page table's width (no host sync on kv_lens).
    splits = num_splits_for(batch, hkv, table_cols * page, cfg, _num_sms(device), block_n)
    use_tma = bool(cfg.get("USE_TMA", False)) and page % block_n == 0 and contiguous
    split_kw = dict(Q_LEN=q_len, G=g, PAGE=page, HEAD_D=d, BLOCK_M=block_m, BLOCK_N=block_n,
                    SPLIT=splits > 1, LAZY_RESCALE=bool(cfg["LAZY_RESCALE"]), USE_TMA=use_tma,
                    FUSED_MERGE=splits > 1 and bool(cfg.get("FUSED_MERGE", False)),
                    num_warps=num_warps, num_stages=num_stages)
    # "balanced": the chunk from the real lengths, the same in both kernels (_split_chunk)
    balance = dict(BALANCE=cfg.get("SPLIT_POLICY") == "balanced" and splits > 1,
                   BLOCK_B=triton.next_power_of_2(batch), SLOTS=_num_sms(device) * cfg["CTAS_PER_SM"],
                   MIN_CHUNK=cfg["MIN_SPLIT_TOKENS"], OVERHEAD=cfg["SPLIT_OVERHEAD_TOKENS"])
    split_kw.update(balance)
    merge_kw = dict(Q_LEN=q_len, HEAD_D=d, BLOCK_N=block_n, BLOCK_S=cfg["REDUCE_BLOCK_S"], HKV=hkv, **balance,
                    num_warps=4)
    # Partials live in one fp32 allocation: o_part [rows, hq, S, d] then lse_part [rows, hq, S],
    # both contiguous, so their strides (and every address the kernels compute) are those of two
    # separate torch.empty calls. One allocation per call instead of two.
    n_o = rows * hq * splits * d
    ws_len = n_o + rows * hq * splits if splits > 1 else 0
    part_strides = (splits * d * hq, splits * d, d, splits * hq, splits) if splits > 1 else (0,) * 5
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLAN_COUNT[0] += 1
    plan = (float(softmax_scale) * _LOG2E, splits, (batch, hkv, splits), (rows, hq), split_kw, merge_kw,
            ws_len, n_o, part_strides, _PLAN_COUNT[0])
    _PLANS[key] = plan
    return plan


_SPLIT_LAUNCH = _Launch(_fa4_decode_kernel)
_MERGE_LAUNCH = _Launch(_fa4_decode_merge_kernel)

# The last cache pair's descriptors (host objects: a view and a TensorDescriptor each), reused
# only for the very same tensors at the same address, shape and strides; one entry, replaced by
# the next pair (a decode server passes the same caches every step).
_LAST_DESCS = {}


def _descs(k_cache, v_cache, block_n):
    from triton.tools.tensor_descriptor import TensorDescriptor

    ident = (id(k_cache), id(v_cache), k_cache.data_ptr(), v_cache.data_ptr(), tuple(k_cache.shape),
             tuple(k_cache.stride()), tuple(v_cache.stride()), block_n)
    hit = _LAST_DESCS.get(ident)
    if hit is not None and hit[0] is k_cache and hit[1] is v_cache:
        return hit[2]
    pages, page, hkv, d = k_cache.shape
    made = tuple(TensorDescriptor(c.view(pages * page, hkv * d), [pages * page, hkv * d], [hkv * d, 1],
                                  [block_n, d]) for c in (k_cache, v_cache))
    _LAST_DESCS.clear()
    _LAST_DESCS[ident] = (k_cache, v_cache, made)
    return made


# Triton's interpreter wraps @triton.jit functions in objects without a compile cache: this module runs
# under it (TRITON_INTERPRET=1, the CPU tests) exactly when the split kernel lacks device_caches.
_INTERPRETED = not hasattr(_fa4_decode_kernel, "device_caches")

# ---------------------------------------------------------------------------------------------------
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
    # Partials as the Triton path lays them out: o_part [rows, hq, S, d] then lse_part [rows, hq, S].
    n_o = rows * hq * splits * d
    ws_len = n_o + rows * hq * splits if splits > 1 else 0
    part_strides = (splits * d * hq, splits * d, d, splits * hq, splits) if splits > 1 else (0,) * 5
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
    if splits > 1:
        ws = torch.empty(ws_len, dtype=torch.float32, device=q.device)  # fresh per call (streams)
        o_part = ws.narrow(0, 0, n_o)
        lse_part = ws.narrow(0, n_o, ws_len - n_o)
    else:
        o_part = lse_part = o  # unused placeholders
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
        _MERGE_LAUNCH(merge_grid, plan_key, (
            o_part, lse_part, o, kv_lens,
            ps[0], ps[1], ps[2], ps[3], ps[4],
            so_t, so_h,
            splits), merge_kw)
    return o


# ---------------------------------------------------------------------------------------------------
# Which kernel runs a call. Checked cheaply every call:
# - _SM90: device index -> '' when it is an NVIDIA sm_90 GPU, else why not (asked once a device).
# - _ROUTES: (device index, shapes, dtypes) -> '' when the Gluon kernel takes such a call, else why not.
_SM90 = {}
_ROUTES = {}


def _sm90_unfit(index):
    major, minor = torch.cuda.get_device_capability(index)
    name = torch.cuda.get_device_name(index)
    if (major, minor) != (9, 0) or "NVIDIA" not in name:
        return f"{name} (capability {major}.{minor}) is not an NVIDIA sm_90 GPU"
    return ""


def _shapes_unfit(q_shape, k_shape, v_shape, pt_shape, kvl_shape, dtypes):
    if len(q_shape) != 3 or len(k_shape) != 4 or v_shape != k_shape:
        return "q must be [B * q_len, Hq, D] and both caches [pages, page, Hkv, D] alike"
    rows, hq, d = q_shape
    page, hkv, dk = k_shape[1], k_shape[2], k_shape[3]
    if d != _GL_HEAD_D or dk != _GL_HEAD_D:
        return f"head dim {d}/{dk}, the kernel's is {_GL_HEAD_D}"
    if page != _GL_PAGE:
        return f"pages of {page} tokens, the kernel's are {_GL_PAGE}"
    if hkv == 0 or hq % hkv:
        return f"{hq} query heads do not group over {hkv} KV heads"
    if len(kvl_shape) != 1 or len(pt_shape) != 2 or pt_shape[0] != kvl_shape[0]:
        return "page_table must be [B, max_pages] and kv_lens [B]"
    batch = kvl_shape[0]
    if batch == 0 or rows % batch:
        return f"{rows} q rows are not q_len rows for each of {batch} sequences"
    q_len, g = rows // batch, hq // hkv
    if q_len * g > _GL_BLOCK_M:
        return f"q_len {q_len} x group {g} = {q_len * g} packed rows, the kernel's tile holds {_GL_BLOCK_M}"
    if dtypes[:3] != (torch.bfloat16, torch.bfloat16, torch.bfloat16):
        return f"q, k_cache, v_cache are {dtypes[0]}, {dtypes[1]}, {dtypes[2]}, not bfloat16"
    if dtypes[3:] != (torch.int32, torch.int32):
        return f"page_table, kv_lens are {dtypes[3]}, {dtypes[4]}, not int32"
    return ""


def _gluon_unfit(q, k_cache, v_cache, page_table, kv_lens):
    """'' when the Gluon kernel can run this call, else why not (one clause)."""
    if not q.is_cuda:
        return "the tensors are not on a CUDA GPU"
    if _INTERPRETED:
        return "Triton's interpreter runs this module (TRITON_INTERPRET=1) and cannot run Gluon"
    index = q.get_device()
    why = _SM90.get(index)
    if why is None:
        why = _SM90[index] = _sm90_unfit(index)
    if why:
        return why
    key = (index, q.shape, k_cache.shape, v_cache.shape, page_table.shape, kv_lens.shape, q.dtype, k_cache.dtype,
           v_cache.dtype, page_table.dtype, kv_lens.dtype)
    why = _ROUTES.get(key)
    if why is None:
        if len(_ROUTES) >= 256:
            _ROUTES.clear()
        why = _ROUTES[key] = _shapes_unfit(key[1], key[2], key[3], key[4], key[5], key[6:])
    if why:
        return why
    if not (q.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous()):
        return "q, k_cache and v_cache must be contiguous (TMA views the caches as 2-D)"
    if (q.data_ptr() | k_cache.data_ptr() | v_cache.data_ptr()) & 15:
        return "q, k_cache and v_cache must start at 16-byte aligned addresses (TMA)"
    return ""


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    """Paged decode for q_len 1 or 4. Shapes in the module docstring; returns o like q. Runs the kernel
    CONFIG["kernel"] picks (module docstring); no host sync either way."""
    cfg = CONFIG
    kernel = cfg.get("kernel", "auto")
    if kernel == "auto":
        if not _gluon_unfit(q, k_cache, v_cache, page_table, kv_lens):
            return _gluon_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, cfg)
    elif kernel == "gluon":
        unfit = _gluon_unfit(q, k_cache, v_cache, page_table, kv_lens)
        if unfit:
            raise ValueError(f"fa4_decode: CONFIG['kernel'] is 'gluon' but the Gluon kernel cannot run this call: "
                             f"{unfit}; use 'auto' (Gluon where it can, else Triton) or 'triton'")
        return _gluon_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, cfg)
    elif kernel != "triton":
        raise ValueError(f"fa4_decode: CONFIG['kernel'] is 'auto', 'triton' or 'gluon', not {kernel!r}")
    return _triton_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale)


def _triton_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    """The op on the Triton kernel: the baseline's fa4_decode, unchanged. Shapes in the module docstring.

    Per call on the host: one plan lookup, one or two allocations (o; the split partials, and with
    FUSED_MERGE the zeroed counters), one or two launches (one with FUSED_MERGE), each straight
    through its compiled kernel once Triton compiled it for that key (_Launch). No host sync:
    nothing reads a device value.
    """
    rows, hq, d = q.shape
    num_pages, page, hkv, dk = k_cache.shape
    assert d == dk and v_cache.shape == k_cache.shape and hq % hkv == 0
    batch = kv_lens.shape[0]
    scale, splits, grid, merge_grid, split_kw, merge_kw, ws_len, n_o, ps, plan_key = _plan(
        CONFIG, rows, hq, d, page, hkv, batch, page_table.shape[1], q.device, softmax_scale,
        k_cache.is_contiguous() and v_cache.is_contiguous())
    o = torch.empty_like(q)
    if split_kw["USE_TMA"]:
        k_desc, v_desc = _descs(k_cache, v_cache, split_kw["BLOCK_N"])
    else:
        k_desc, v_desc = k_cache, v_cache  # unused placeholders
    if splits > 1:
        # Fresh per call, not cached: the contract keeps streams out of reach, so a cached buffer
        # could not tell two streams apart (the caching allocator recycles blocks per stream).
        ws = torch.empty(ws_len, dtype=torch.float32, device=q.device)
        o_part = ws.narrow(0, 0, n_o)
        lse_part = ws.narrow(0, n_o, ws_len - n_o)
    else:
        o_part = lse_part = o  # unused placeholders
    fused = split_kw["FUSED_MERGE"]
    # FUSED_MERGE: one arrival counter per (sequence, KV head), zero at every call (a memset, not a
    # kernel of ours: the counters of a call that died mid-way must not leak into the next)
    cnt = torch.zeros(batch * hkv, dtype=torch.int32, device=q.device) if fused else o
    so_t, so_h = o.stride(0), o.stride(1)
    _SPLIT_LAUNCH(grid, plan_key, (
        q, k_cache, v_cache, o, page_table, kv_lens, o_part, lse_part, cnt,
        k_desc, v_desc,
        scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        so_t, so_h,
        page_table.stride(0),
        ps[0], ps[1], ps[2], ps[3], ps[4],
        splits), split_kw)
    if splits > 1 and not fused:
        _MERGE_LAUNCH(merge_grid, plan_key, (
            o_part, lse_part, o, kv_lens,
            ps[0], ps[1], ps[2], ps[3], ps[4],
            so_t, so_h,
            splits), merge_kw)
    return o
