"""Helpers shared by the paged-attention ops' trusted modules (references and input generators).

Not a kernel: nothing here is importable by a candidate (the static policy forbids kernels.*).
"""

from __future__ import annotations

import math

import torch


def gather(cache: torch.Tensor, pages: torch.Tensor, length: int) -> torch.Tensor:
    """Tokens 0..length-1 of one sequence from a paged cache [num_pages, page, H, D] -> [length, H, D]."""
    page = cache.shape[1]
    n_pages = (length + page - 1) // page
    return cache[pages[:n_pages].long()].reshape(n_pages * page, *cache.shape[2:])[:length]


@torch.no_grad()
def attention(q, k_cache, v_cache, page_table, q_starts, q_lens, kv_lens, scale, dtype=torch.float64,
              operands=None, block=512):
    """Exact bottom-right causal attention over paged K/V, one sequence and query block at a time.

    q [T_q, Hq, D]; sequence n owns rows q_starts[n] : q_starts[n] + q_lens[n] and kv_lens[n] keys.
    Computed in ``dtype``; with ``operands`` (e.g. bf16) the two products round their operands to
    that dtype first, as a flash-attention kernel does (P is rounded before P V).
    """
    T, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    group = Hq // Hkv
    out = torch.zeros(T, Hq, D, dtype=dtype, device=q.device)

    def rnd(x):
        return x if operands is None else x.to(operands).to(dtype)

    for n in range(len(q_lens)):
        qs, ql, L = int(q_starts[n]), int(q_lens[n]), int(kv_lens[n])
        if ql == 0:
            continue
        K = gather(k_cache, page_table[n], L).to(dtype)  # [L, Hkv, D]
        V = gather(v_cache, page_table[n], L).to(dtype)
        Kh = K.permute(1, 0, 2).repeat_interleave(group, dim=0)  # [Hq, L, D]
        Vh = V.permute(1, 0, 2).repeat_interleave(group, dim=0)
        for b0 in range(0, ql, block):
            b1 = min(b0 + block, ql)
            Q = q[qs + b0: qs + b1].to(dtype).permute(1, 0, 2)  # [Hq, rows, D]
            s = (rnd(Q) @ rnd(Kh).transpose(1, 2)) * scale  # [Hq, rows, L]
            pos = (L - ql) + torch.arange(b0, b1, device=q.device)  # absolute position of each query
            visible = torch.arange(L, device=q.device)[None, :] <= pos[:, None]
            s = s.masked_fill(~visible[None], float("-inf"))
            p = torch.softmax(s, dim=-1)
            out[qs + b0: qs + b1] = (rnd(p) @ rnd(Vh)).permute(1, 0, 2)
    return out


def default_scale(dim: int) -> float:
    return 1.0 / math.sqrt(dim)


def paged_cache(kv_lens, hkv, dim, page, gen, device, spare=0.125, table_pages=0):
    """K/V caches and a page table with shuffled, non-contiguous pages and unused pages in the pool.

    Everything a kernel must not read is NaN: unused pages, the tail rows of each last page and page
    0, which no sequence owns (a masked page-table load that falls back to id 0 lands on NaN too);
    the table's padding slots point at NaN pages. NaN, not large finite garbage: garbage times a zero
    softmax weight vanishes, NaN times zero does not, so a kernel that reads past a length fails
    however it masks the weights. ``table_pages`` widens the page table beyond the longest sequence
    (padding slots, as a server that sizes its tables for the longest sequence it allows).
    """
    need = [(L + page - 1) // page for L in kv_lens]
    used = sum(need)
    pool = 1 + used + max(2, int(used * spare))
    max_pages = max(max(need), 1, table_pages)
    perm = (1 + torch.randperm(pool - 1, generator=gen, device=device)).to(torch.int32)  # page 0 stays unused
    nan = float("nan")
    k_cache = torch.full((pool, page, hkv, dim), nan, device=device)
    v_cache = torch.full((pool, page, hkv, dim), nan, device=device)
    spare_ids = torch.cat([torch.zeros(1, dtype=torch.int32, device=device), perm[used:]])
    table = spare_ids[torch.randint(0, len(spare_ids), (len(kv_lens), max_pages), generator=gen,
                                    device=device)].clone()
    at = 0
    for n, (L, cnt) in enumerate(zip(kv_lens, need)):
        ids = perm[at: at + cnt]
        at += cnt
        table[n, :cnt] = ids
        if cnt:
            real = torch.randn(cnt * page, hkv, dim, generator=gen, device=device)
            real[L:] = nan  # tail rows of the last page
            k_cache[ids.long()] = real.view(cnt, page, hkv, dim)
            real = torch.randn(cnt * page, hkv, dim, generator=gen, device=device)
            real[L:] = nan
            v_cache[ids.long()] = real.view(cnt, page, hkv, dim)
    return k_cache.to(torch.bfloat16), v_cache.to(torch.bfloat16), table


def refresh(base: dict, kv_lens: list[int], page: int, seed: int, mag: float = 1.0) -> dict:
    """New values for a timed call, from ``base`` and ``seed`` alone (aka.evaluate.host.rotation): a fresh q and the
    full pages permuted among the sequences (the partial last pages, with their NaN tails, stay put).
    Every sequence then attends over other keys with another query, so no result can be reused, and
    the pool itself is not rewritten: gigabytes of GPU traffic before each timed call would heat the
    device the timing then measures."""
    q, table = base["q"], base["page_table"]
    device = q.device
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    out = dict(base)
    out["q"] = (mag * torch.randn(q.shape, generator=gen, device=device)).to(q.dtype)
    full = torch.tensor([L // page for L in kv_lens], device=device)
    mask = torch.arange(table.shape[1], device=device)[None, :] < full[:, None]
    ids = table[mask]
    new = table.clone()
    new[mask] = ids[torch.randperm(ids.numel(), generator=gen, device=device)]
    out["page_table"] = new
    return out
