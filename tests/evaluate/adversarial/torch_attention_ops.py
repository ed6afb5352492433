"""The whole decode attention in plain torch operators: nothing the static policy can name (no
torch function beyond glue, no forbidden method, no @), so only the run-time launch check sees it.
Correct, and no Triton kernel runs. Op: fa4_decode."""

import math

import torch


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    rows, hq, d = q.shape
    _, page, hkv, _ = k_cache.shape
    b = kv_lens.shape[0]
    q_len = rows // b
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    o = torch.empty_like(q)
    for n, kv in enumerate(kv_lens.tolist()):
        keys = torch.cat([k_cache.select(0, int(p)) for p in page_table[n].tolist()[: (kv + page - 1) // page]])
        vals = torch.cat([v_cache.select(0, int(p)) for p in page_table[n].tolist()[: (kv + page - 1) // page]])
        keys, vals = keys.narrow(0, 0, kv).float(), vals.narrow(0, 0, kv).float()
        for j in range(q_len):
            pos = kv - q_len + j
            for h in range(hq):
                kh = keys.select(1, h // (hq // hkv)).narrow(0, 0, pos + 1)
                vh = vals.select(1, h // (hq // hkv)).narrow(0, 0, pos + 1)
                s = (q[n * q_len + j, h].float() * kh).sum(-1) * scale
                w = math.e ** (s - s.max())
                o[n * q_len + j, h] = ((w.unsqueeze(-1) * vh).sum(0) / w.sum()).to(q.dtype)
    return o
