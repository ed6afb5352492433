"""Asks for 200 GB of scratch. Op: fa4_decode. GPU only (a CPU may overcommit and say yes)."""

import torch


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    scratch = torch.empty(100 * 1024**3, dtype=torch.bfloat16, device=q.device)  # 200 GB
    o = torch.zeros_like(q)
    o.copy_(scratch[: o.numel()].view(o.shape))
    return o
