"""fa4_decode references: exact float64 attention of the q_len new rows of each sequence over its
gathered pages (drafts causal among themselves), and the plain same-precision version."""

from __future__ import annotations

from pathlib import Path

import torch

from aka.contract.ops import load_module

_lib = load_module(Path(__file__).resolve().parents[1] / "_shared" / "paged.py", "aka_kernels_shared_paged")


def _run(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, dtype, operands):
    B = kv_lens.shape[0]
    q_len = q.shape[0] // B
    scale = _lib.default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    starts = [b * q_len for b in range(B)]
    return _lib.attention(q, k_cache, v_cache, page_table, starts, [q_len] * B, kv_lens.tolist(), scale,
                          dtype=dtype, operands=operands)


@torch.no_grad()
def reference(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    """Float64 exact attention: returns (o,) in float64."""
    return (_run(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, torch.float64, None),)


@torch.no_grad()
def plain(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    """bf16 operands, float32 softmax and accumulation, bf16 output."""
    return (_run(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, torch.float32, torch.bfloat16)
            .to(torch.bfloat16),)
