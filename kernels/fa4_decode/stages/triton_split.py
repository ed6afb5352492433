"""The Triton kernels (flash-decoding; the fa4_decode baseline's since 2026-11-29): runs wherever Triton runs,
its CPU interpreter included.

Design (memory-bound):
- One program per (sequence, KV head, split). Its M tile packs the q_len tokens x G = Hq/Hkv
  query heads of that KV head (M = q_len * G rows, padded to >= 16), so every K/V byte is read
  once and both products run on tensor cores (tl.dot).
- Split-KV: each sequence's keys are cut into NUM_SPLITS chunks (chunk = cdiv(kv_len, S)
  rounded up to BLOCK_N, computed in the kernel, so no host sync). NUM_SPLITS comes from shapes
  only: enough programs to fill the SMs (SPLIT_TARGET), at least MIN_SPLIT_TOKENS keys each.
  Partials (normalised o, log2-sum-exp) go to fp32 scratch; a second kernel merges them by
  max / sum-exp. With one split the first kernel writes o directly. FUSED_MERGE: no second
  kernel; the last split program of each (sequence, KV head) to finish, found by an atomic counter
  (zeroed per call), merges that tile's partials from L2 (correct on the H200 but slower,
  2026-12-02: CONFIG's comment).
- Keys are gathered through the page table per key (any BLOCK_N, any page size and Hkv), or with
  USE_TMA as whole [BLOCK_N, D] boxes through one 2-D tensor descriptor over the cache viewed as
  [pages * PAGE, Hkv * D] (one page-table read per block; needs PAGE % BLOCK_N == 0 so a block never
  crosses a page, and a contiguous cache): the prefill's TMA path. On by default since the H200
  sweep of 2026-12-02 (with BN 64 / 2 stages at q_len 1: +1.7 points of the bandwidth floor).
- SPLIT_POLICY "balanced" (interpreter-checked; on an H100, 2026-12-07, 1.00-1.10x the op's kernel on the
  >= 537 MB q_len 1 shapes): the chunk is also at least the batch's fair share of the SLOTS resident
  programs, chosen in the kernel from the real kv_lens (_split_chunk), so short sequences take one program
  and long ones several of about the same length, in about one wave, whatever the raggedness. NUM_SPLITS
  (the "target" count) stays the upper bound the partials are sized for.
- The merge kernel also serves the Gluon split kernel (gluon_split.py), which writes the same partials;
  SKIP_ONE skips a sequence of one split, whose o that kernel wrote itself.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import _LOG2E, _PLAN_COUNT, _PLANS_MAX, _Launch, _num_sms, _partials, _scratch, num_splits_for


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


# Per-shape launch plans: everything the call derives from shapes, the CONFIG values and the
# scale (block sizes, split count, grids, constexprs) is computed once and looked up by a key of
# plain Python values, so a repeated eager call does no split-policy arithmetic and builds no
# kwargs dict. The key holds CONFIG's items, so a search that swaps or edits CONFIG gets a new plan.
_PLANS = {}


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
    ws_len, n_o, part_strides = _partials(rows, hq, splits, d)
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLAN_COUNT[0] += 1
    plan = (float(softmax_scale) * _LOG2E, splits, (batch, hkv, splits), (rows, hq), split_kw, merge_kw,
            ws_len, n_o, part_strides, _PLAN_COUNT[0])
    _PLANS[key] = plan
    return plan


_SPLIT_LAUNCH = _Launch(_fa4_decode_kernel)
_MERGE_LAUNCH = _Launch(_fa4_decode_merge_kernel)


def _merge(grid, plan_key, o_part, lse_part, o, kv_lens, ps, splits, merge_kw):
    """The merge kernel over the partials of either split kernel (the same layout, ps its strides) into o."""
    _MERGE_LAUNCH(grid, plan_key, (
        o_part, lse_part, o, kv_lens,
        ps[0], ps[1], ps[2], ps[3], ps[4],
        o.stride(0), o.stride(1),
        splits), merge_kw)


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


def _triton_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, cfg):
    """The op on the Triton kernels: the entry's arguments and the CONFIG to use; returns o like q.

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
        cfg, rows, hq, d, page, hkv, batch, page_table.shape[1], q.device, softmax_scale,
        k_cache.is_contiguous() and v_cache.is_contiguous())
    o = torch.empty_like(q)
    if split_kw["USE_TMA"]:
        k_desc, v_desc = _descs(k_cache, v_cache, split_kw["BLOCK_N"])
    else:
        k_desc, v_desc = k_cache, v_cache  # unused placeholders
    o_part, lse_part = _scratch(o, splits, ws_len, n_o)
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
        _merge(merge_grid, plan_key, o_part, lse_part, o, kv_lens, ps, splits, merge_kw)
    return o
