"""FLOPs and minimal bytes of an fa4_decode case (ops-background §5.3).

FLOPs = 4 · Hq · D · Σ over new rows of the keys each sees (draft j of q_len sees L - q_len + j + 1);
bytes = K and V of every cached token once (1 KiB per token per KV head at D = 256), plus q and o.
"""

from __future__ import annotations


def flops(case) -> float:
    ql = case.q_len
    visible = sum(ql * (L - ql) + ql * (ql + 1) // 2 for L in case.kv_lens)
    return float(4 * case.hq * case.dim * visible)


def kv_bytes(case) -> float:
    return float(2 * sum(case.kv_lens) * case.hkv * case.dim * 2)


def min_bytes(case) -> float:
    B = len(case.kv_lens)
    qo = 2 * B * case.q_len * case.hq * case.dim * 2
    table = sum(-(-L // case.page) for L in case.kv_lens) * 4
    return kv_bytes(case) + qo + table + B * 4
