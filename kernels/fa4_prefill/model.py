"""FLOPs and minimal bytes of an fa4_prefill case (ops-background §5.2).

Causal FLOPs = 4 · D · Hq · Σ over new tokens of the keys each sees (P + i for token i = 1..q_len);
bytes = Q and O once (bf16) plus K and V of every visible token once (bf16), page table and lengths.
"""

from __future__ import annotations


def _seqs(case):
    prefix = list(case.prefix) or [0] * len(case.q_lens)
    return list(zip(case.q_lens, prefix))


def flops(case) -> float:
    visible = sum(n * p + n * (n + 1) // 2 for n, p in _seqs(case))
    return float(4 * case.dim * case.hq * visible)


def min_bytes(case) -> float:
    t_q = sum(case.q_lens)
    kv = sum(n + p for n, p in _seqs(case))
    qo = 2 * t_q * case.hq * case.dim * 2
    kvb = 2 * kv * case.hkv * case.dim * 2
    table = sum(-(-(n + p) // case.page) for n, p in _seqs(case)) * 4
    return float(qo + kvb + table + len(case.q_lens) * 8)
