"""fa4_prefill references: exact float64 attention over the gathered pages (bottom-right causal),
and the plain same-precision version (bf16 operands, float32 softmax) the gate compares against."""

from __future__ import annotations

from pathlib import Path

import torch

from aka.contract.ops import load_module

# Trusted modules are loaded by path, so shared helpers are too.
_lib = load_module(Path(__file__).resolve().parents[1] / "_shared" / "paged.py", "aka_kernels_shared_paged")


def _run(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale, dtype, operands):
    scale = _lib.default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    cu = cu_seqlens_q.tolist()
    q_lens = [b - a for a, b in zip(cu[:-1], cu[1:])]
    return _lib.attention(q, k_cache, v_cache, page_table, cu[:-1], q_lens, kv_lens.tolist(), scale,
                         dtype=dtype, operands=operands)


@torch.no_grad()
def reference(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale=None):
    """Float64 exact attention: returns (o,) in float64."""
    return (_run(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale, torch.float64, None),)


@torch.no_grad()
def plain(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale=None):
    """bf16 operands, float32 softmax and accumulation, bf16 output."""
    o = _run(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale, torch.float32, torch.bfloat16)
    return (o.to(torch.bfloat16),)
