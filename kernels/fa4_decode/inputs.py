"""Deterministic inputs for an fa4_decode case: q_len new rows per sequence, K/V in a paged pool
with shuffled, non-contiguous pages; everything no sequence owns is NaN
(kernels/_shared/paged.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from aka.contract.ops import load_module

_lib = load_module(Path(__file__).resolve().parents[1] / "_shared" / "paged.py", "aka_kernels_shared_paged")


def make_inputs(case, seed: int, device="cpu") -> dict:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    kv_lens = list(case.kv_lens)
    if case.hq % case.hkv:
        raise ValueError(f"{case.id}: hq={case.hq} is not a multiple of hkv={case.hkv}")
    if min(kv_lens) < case.q_len:
        raise ValueError(f"{case.id}: every kv length must hold the q_len={case.q_len} new tokens")
    k_cache, v_cache, table = _lib.paged_cache(kv_lens, case.hkv, case.dim, case.page, gen, device,
                                               table_pages=case.table_pages)
    q = case.mag * torch.randn(len(kv_lens) * case.q_len, case.hq, case.dim, generator=gen, device=device)
    return {
        "q": q.to(torch.bfloat16),
        "k_cache": k_cache,
        "v_cache": v_cache,
        "page_table": table,
        "kv_lens": torch.tensor(kv_lens, dtype=torch.int32, device=device),
    }


def refresh(case, base: dict, seed: int) -> dict:
    """The inputs of a timed call: a new q and page order from ``seed`` (aka.evaluate.host.rotation)."""
    return _lib.refresh(base, list(case.kv_lens), case.page, seed, case.mag)
