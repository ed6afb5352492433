"""Deterministic inputs for an fa4_prefill case: new tokens on an optional cached prefix, K/V in a
paged pool with shuffled, non-contiguous pages; everything no sequence owns is NaN
(kernels/_shared/paged.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from aka.contract.ops import load_module

_lib = load_module(Path(__file__).resolve().parents[1] / "_shared" / "paged.py", "aka_kernels_shared_paged")


def make_inputs(case, seed: int, device="cpu") -> dict:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    q_lens = list(case.q_lens)
    prefix = list(case.prefix) or [0] * len(q_lens)
    if len(prefix) != len(q_lens):
        raise ValueError(f"{case.id}: prefix has {len(prefix)} entries for {len(q_lens)} sequences")
    if case.hq % case.hkv:
        raise ValueError(f"{case.id}: hq={case.hq} is not a multiple of hkv={case.hkv}")
    kv_lens = [p + n for p, n in zip(prefix, q_lens)]
    k_cache, v_cache, table = _lib.paged_cache(kv_lens, case.hkv, case.dim, case.page, gen, device)
    q = (case.mag * torch.randn(sum(q_lens), case.hq, case.dim, generator=gen, device=device)).to(torch.bfloat16)
    cu = torch.zeros(len(q_lens) + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.cumsum(torch.tensor(q_lens, device=device), 0)
    return {
        "q": q,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "page_table": table,
        "cu_seqlens_q": cu,
        "kv_lens": torch.tensor(kv_lens, dtype=torch.int32, device=device),
    }


def refresh(case, base: dict, seed: int) -> dict:
    """The inputs of a timed call: a new q and page order from ``seed`` (aka.evaluate.host.rotation)."""
    prefix = list(case.prefix) or [0] * len(case.q_lens)
    kv_lens = [p + n for p, n in zip(prefix, case.q_lens)]
    return _lib.refresh(base, kv_lens, case.page, seed, case.mag)
