"""Caches the first call's output per shape and returns a copy of it again (a "memoised" kernel; the copy
keeps it clear of the aliasing check, so the cached-result check is what rejects it). Op: fa4_decode."""

import torch
import triton
import triton.language as tl


@triton.jit
def _decode(q_ptr, k_ptr, v_ptr, o_ptr, pt_ptr, kvl_ptr, scale, stride_pt,
            HQ: tl.constexpr, HKV: tl.constexpr, PAGE: tl.constexpr, D: tl.constexpr,
            Q_LEN: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    h = tl.program_id(1)
    b = row // Q_LEN
    kvh = h // (HQ // HKV)
    kv_len = tl.load(kvl_ptr + b)
    qpos = kv_len - Q_LEN + row % Q_LEN
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + (row * HQ + h) * D + rd).to(tl.float32)
    m = tl.max(tl.zeros([BLOCK_N], dtype=tl.float32), 0) - 1.0e30
    l = m * 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    for n0 in range(0, qpos + 1, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        ok = rn <= qpos
        page = tl.load(pt_ptr + b * stride_pt + rn // PAGE, mask=ok, other=0).to(tl.int64)
        off = ((page * PAGE + rn % PAGE) * HKV + kvh) * D
        k = tl.load(k_ptr + off[:, None] + rd[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
        v = tl.load(v_ptr + off[:, None] + rd[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
        s = tl.where(ok, tl.sum(k * q[None, :], 1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m = m_new
    tl.store(o_ptr + (row * HQ + h) * D + rd, (acc / l).to(tl.bfloat16))


_CACHE = {}


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    key = (tuple(q.shape), tuple(k_cache.shape))
    if key in _CACHE:
        return _CACHE[key].clone()
    rows, hq, d = q.shape
    num_pages, page, hkv, _ = k_cache.shape
    q_len = rows // kv_lens.shape[0]
    scale = d**-0.5 if softmax_scale is None else softmax_scale
    o = torch.empty_like(q)
    _decode[(rows, hq)](q.contiguous(), k_cache.contiguous(), v_cache.contiguous(), o, page_table, kv_lens, scale,
                        page_table.stride(0), HQ=hq, HKV=hkv, PAGE=page, D=d, Q_LEN=q_len, BLOCK_N=32)
    _CACHE[key] = o.clone()
    return o
