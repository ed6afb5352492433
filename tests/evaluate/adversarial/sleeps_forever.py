"""Never returns (no import needed to hang: the policy refuses `time`). Op: fa4_decode."""

import torch


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    o = torch.empty_like(q)
    while True:
        pass
    return o
