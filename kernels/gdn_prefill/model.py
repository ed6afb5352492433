"""FLOPs and minimal bytes of a gdn_prefill case (ops-background §1.3 and §5.1).

FLOPs count the chunked algorithm with full C x C blocks, per token and value head:
6 K V + 2 C (3 K + 2 V) (≈180 kFLOP at K = V = 128, C = 64). Bytes are each input read once and
each output written once: q, k, v, o in bf16, g and beta in fp32, initial and final state in fp32.
"""

from __future__ import annotations

CHUNK = 64


def flops(case) -> float:
    K = V = case.dim
    per_token_head = 6 * K * V + 2 * CHUNK * (3 * K + 2 * V)
    return float(sum(case.seqlens) * case.hv * per_token_head)


def min_bytes(case) -> float:
    T, D, N = sum(case.seqlens), case.dim, len(case.seqlens)
    qk = 2 * T * case.hk * D * 2
    vo = 2 * T * case.hv * D * 2
    gb = 2 * T * case.hv * 4
    states = (2 if case.initial_state else 1) * N * case.hv * D * D * 4
    return float(qk + vo + gb + states + (N + 1) * 4)
