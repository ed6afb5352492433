"""The Triton kernel: FlashAttention-2's forward, one program per (query-head group, q tile). It runs
everywhere Triton runs, its CPU interpreter included: the op's kernel off sm_90 and the fallback on it.

- A q tile is BLOCK_M rows. Unpacked: BLOCK_M tokens of one q head. Packed (PACK_GQA): the
  G = Hq/Hkv heads of one KV head x BLOCK_M/G tokens, so a K/V tile feeds all G heads.
- Tiles of all sequences share grid axis 1 without a host sync: sequence s owns tiles
  [cu[s] // TPT + s, ...) (TPT = tokens per tile); the grid size T_total // TPT + N is an upper
  bound from shapes and surplus programs exit. A program finds its sequence by binary search
  over cu_seqlens_q (the vLLM unified-attention trick). Tiles run heaviest first (reversed).
- K/V rows are gathered through the page table per key (any BLOCK_N, any page size, any Hkv),
  or with USE_TMA through one 2-D tensor descriptor over the whole cache viewed as
  [num_pages * PAGE, Hkv * 256] (a BLOCK_N | PAGE block never crosses a page).
- Online softmax in base 2 (log2(e) folded into the scale), fp32 accumulator.
- SPLIT_CAUSAL: keys every row of the tile sees run in an unmasked loop; the diagonal band
  (and the ragged end) in a masked loop.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import _LOG2E, _PLAN_COUNT, _PLANS_MAX, _Launch


@triton.jit
def _find_seq(cu_ptr, tile, N, TPT: tl.constexpr):
    # Largest s in [0, N) with cu[s] // TPT + s <= tile.
    lo = 0
    hi = N
    while lo < hi:
        mid = (lo + hi) // 2
        start = tl.load(cu_ptr + mid) // TPT + mid
        if start <= tile:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def _attn_block(acc, m_i, l_i, q, k, v, qk_scale, offs_n, qpos, MASKED: tl.constexpr):
    qk = tl.dot(q, tl.trans(k))
    if MASKED:
        qk = tl.where(offs_n[None, :] <= qpos[:, None], qk, float("-inf"))
    # Scale folded into one FMA per score (qk * scale - m) instead of a separate multiply.
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def _fa4_prefill_kernel(
    Q, K, V, O, PT, CU, KVL,
    k_desc, v_desc,
    qk_scale, N,
    stride_qt, stride_qh,
    stride_kp, stride_ks, stride_kh,
    stride_vp, stride_vs, stride_vh,
    stride_ot, stride_oh,
    stride_pt,
    G: tl.constexpr, PAGE: tl.constexpr, HEAD_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PACK_GQA: tl.constexpr, SPLIT_CAUSAL: tl.constexpr, USE_TMA: tl.constexpr,
    WARP_SPEC: tl.constexpr,
):
    GP: tl.constexpr = G if PACK_GQA else 1  # heads per tile
    TPT: tl.constexpr = BLOCK_M // GP  # tokens per tile
    pid_h = tl.program_id(0)
    tile = tl.num_programs(1) - 1 - tl.program_id(1)  # heaviest (last) tiles first

    s = _find_seq(CU, tile, N, TPT)
    q_start = tl.load(CU + s)
    q_len = tl.load(CU + s + 1) - q_start
    tok0 = (tile - (q_start // TPT + s)) * TPT
    if tok0 >= q_len:
        return
    kv_len = tl.load(KVL + s)
    prefix = kv_len - q_len

    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    offs_nb = tl.arange(0, BLOCK_N)
    tok = tok0 + offs_m // GP
    if PACK_GQA:
        head = pid_h * G + offs_m % GP
        kvh = pid_h
    else:
        head = pid_h + offs_m * 0
        kvh = pid_h // G
    row_ok = tok < q_len
    qpos = prefix + tok

    q_rows = (q_start + tok).to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(Q + q_rows[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)

    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - 1.0e30  # finite: a fully masked row gives p = 0, not NaN
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], dtype=tl.float32)

    last_tok = tl.minimum(tok0 + TPT, q_len) - 1
    hi = prefix + last_tok + 1  # keys needed by the last row of the tile
    if SPLIT_CAUSAL:
        lo_end = ((prefix + tok0 + 1) // BLOCK_N) * BLOCK_N  # every row sees all keys < lo_end
    else:
        lo_end = 0
    pt_row = PT + s.to(tl.int64) * stride_pt
    k_off = kvh * stride_kh
    v_off = kvh * stride_vh

    # Unmasked part: full key blocks below the tile's first query position.
    for n0 in tl.range(0, lo_end, BLOCK_N, warp_specialize=WARP_SPEC):
        offs_n = n0 + offs_nb
        if USE_TMA:
            page = tl.load(pt_row + n0 // PAGE)
            row = page * PAGE + n0 % PAGE
            k = k_desc.load([row, kvh * HEAD_D])
            v = v_desc.load([row, kvh * HEAD_D])
        else:
            page = tl.load(pt_row + offs_n // PAGE).to(tl.int64)
            k = tl.load(K + (page * stride_kp + (offs_n % PAGE) * stride_ks + k_off)[:, None] + offs_d[None, :])
            v = tl.load(V + (page * stride_vp + (offs_n % PAGE) * stride_vs + v_off)[:, None] + offs_d[None, :])
        acc, m_i, l_i = _attn_block(acc, m_i, l_i, q, k, v, qk_scale, offs_n, qpos, False)

    # Masked part: the causal diagonal band and the ragged end of the sequence.
    for n0 in range(lo_end, hi, BLOCK_N):
        offs_n = n0 + offs_nb
        n_ok = offs_n < kv_len
        if USE_TMA:
            page = tl.load(pt_row + n0 // PAGE)
            row = page * PAGE + n0 % PAGE
            k = k_desc.load([row, kvh * HEAD_D])
            v = v_desc.load([row, kvh * HEAD_D])
            # Slots past kv_len in the last page hold whatever the pool holds (maybe NaN): zero them.
            v = tl.where(n_ok[:, None], v, 0.0)
        else:
            page = tl.load(pt_row + offs_n // PAGE, mask=n_ok, other=0).to(tl.int64)
            kv_mask = n_ok[:, None]
            k = tl.load(K + (page * stride_kp + (offs_n % PAGE) * stride_ks + k_off)[:, None] + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            v = tl.load(V + (page * stride_vp + (offs_n % PAGE) * stride_vs + v_off)[:, None] + offs_d[None, :],
                        mask=kv_mask, other=0.0)
        # Padding rows (tok >= q_len) may have qpos >= kv_len; they are never stored.
        acc, m_i, l_i = _attn_block(acc, m_i, l_i, q, k, v, qk_scale, offs_n, qpos, True)

    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    out = acc / l_safe[:, None]
    o_rows = (q_start + tok).to(tl.int64) * stride_ot + head * stride_oh
    tl.store(O + o_rows[:, None] + offs_d[None, :], out.to(O.dtype.element_ty), mask=row_ok[:, None])


# Triton's interpreter (TRITON_INTERPRET=1 when this module was imported) makes every @triton.jit kernel an
# InterpretedFunction, which has no per-device compile caches; the entry runs Gluon only where this is False
# (the environment itself is out of a kernel module's reach: aka's policy).
_INTERPRETED = not hasattr(_fa4_prefill_kernel, "device_caches")


# Host-side state reused across calls (built once, looked up by plain Python keys):
# - _PLANS: per shape and CONFIG (the key holds CONFIG's items, so a search that swaps or edits
#   CONFIG gets a new plan): grid, constexprs, scale, whether TMA applies.
# - _DESCS: the last K/V cache pair's TMA descriptors. A TensorDescriptor is a host object
#   (base tensor, shape, strides, block shape); rebuilding it per call costs two views and two
#   dataclass constructions. The entry is reused only for the very same tensor objects with the
#   same data pointer, shape and strides, so a new or re-pointed cache always gets a fresh pair.
#   It holds one reference to the last caches (views of them), released when another pair comes.
_PLANS = {}
_DESCS = []  # [(k_cache, v_cache, key, (k_desc, v_desc))], at most one entry


def _tma_descs(k_cache, v_cache, block_n):
    from triton.tools.tensor_descriptor import TensorDescriptor

    num_pages, page, hkv, d = k_cache.shape
    descs = []
    for c in (k_cache, v_cache):
        flat = c.view(num_pages * page, hkv * d)
        descs.append(TensorDescriptor(flat, list(flat.shape), list(flat.stride()), [block_n, d]))
    return descs


def _cached_descs(k_cache, v_cache, block_n):
    key = (k_cache.data_ptr(), v_cache.data_ptr(), k_cache.shape, v_cache.shape,
           k_cache.stride(), v_cache.stride(), block_n)
    if _DESCS:
        ck, cv, ckey, descs = _DESCS[0]
        if ck is k_cache and cv is v_cache and ckey == key:
            return descs
    descs = _tma_descs(k_cache, v_cache, block_n)
    _DESCS[:] = [(k_cache, v_cache, key, descs)]
    return descs


def _plan(cfg, t_total, hq, d, page, hkv, n, contiguous, softmax_scale, device):
    key = (t_total, hq, d, page, hkv, n, contiguous, softmax_scale, device, tuple(cfg.items()))
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    g = hq // hkv
    if softmax_scale is None:
        softmax_scale = d ** -0.5
    block_m, block_n = cfg["BLOCK_M"], cfg["BLOCK_N"]
    pack = bool(cfg["PACK_GQA"])
    use_tma = bool(cfg["USE_TMA"])
    # Packing needs whole head groups per tile (G = 6 at Hq 24 / Hkv 4 does not divide 64 or 128):
    # such shapes run unpacked, so a searched CONFIG holds on every shape of the workload.
    pack = pack and block_m % g == 0
    # TMA blocks must not cross a page and need the cache viewable as 2-D: else gather by pointer.
    use_tma = use_tma and page % block_n == 0 and contiguous
    tpt = block_m // g if pack else block_m
    # Upper bound on tiles from shapes alone (no host sync): sum_s cdiv(q_len_s, tpt) <= T // tpt + N.
    grid = (hkv if pack else hq, t_total // tpt + n)
    kw = dict(G=g, PAGE=page, HEAD_D=d, BLOCK_M=block_m, BLOCK_N=block_n,
              PACK_GQA=pack, SPLIT_CAUSAL=bool(cfg["SPLIT_CAUSAL"]), USE_TMA=use_tma,
              WARP_SPEC=bool(cfg.get("WARP_SPEC", False)),
              num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    _PLAN_COUNT[0] += 1
    # the launch cache keys on the plan's number (hashing the whole key again per launch costs)
    plan = (float(softmax_scale) * _LOG2E, grid, use_tma, block_n, kw, _PLAN_COUNT[0])
    _PLANS[key] = plan
    return plan


_LAUNCH = _Launch(_fa4_prefill_kernel)


def _triton_forward(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale, cfg):
    """The op on the Triton kernel: the entry's arguments and the CONFIG to use; returns o like q.

    Per call on the host: one plan lookup, one descriptor-cache check, one allocation (o), one
    launch, straight through the compiled kernel once Triton compiled it for that key (_Launch).
    No host sync: the grid is an upper bound from shapes.
    """
    t_total, hq, d = q.shape
    num_pages, page, hkv, dk = k_cache.shape
    assert d == dk and v_cache.shape == k_cache.shape and hq % hkv == 0
    n = kv_lens.shape[0]
    contiguous = k_cache.is_contiguous() and v_cache.is_contiguous()
    scale, grid, use_tma, block_n, kw, plan_key = _plan(cfg, t_total, hq, d, page, hkv, n, contiguous, softmax_scale,
                                                     q.device)
    o = torch.empty_like(q)
    if t_total == 0:
        return o
    if use_tma:
        k_desc, v_desc = _cached_descs(k_cache, v_cache, block_n)
    else:
        k_desc, v_desc = k_cache, v_cache  # unused placeholders
    _LAUNCH(grid, plan_key, (
        q, k_cache, v_cache, o, page_table, cu_seqlens_q, kv_lens,
        k_desc, v_desc,
        scale, n,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        o.stride(0), o.stride(1),
        page_table.stride(0)), kw)
    return o
