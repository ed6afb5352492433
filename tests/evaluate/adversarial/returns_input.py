"""Returns an input: q has o's shape and dtype, so only a storage check names the cheat. Op: fa4_decode."""

import torch


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    torch.empty_like(q)  # looks busy
    return q
