"""FlashAttention-4 (the flash-attn-4 package: CuTe DSL kernels for sm90 / sm100) as a paged competitor
of fa4_prefill and fa4_decode (trusted code, not a kernel).

Its varlen entry takes the contracts' paged layout as it is: q packed [T, Hq, D], K/V caches
[num_pages, page, Hkv, D], page_table [N, max_pages] int32, seqused_k = the KV lengths, causal aligned
bottom-right when a sequence has fewer queries than keys. One difference matters: its TMA page loads
read whole pages, so the rows past a sequence's length in its last page must be finite (its
docstring: P = 0 times a NaN V row is still NaN). The contracts allow anything there and aka's
inputs put NaN there on purpose, so the competitor is timed on copies of the caches with those rows
zeroed, made once outside the timing.
"""

from __future__ import annotations

from typing import Any


def dsl_on_path() -> str | None:
    """Put nvidia-cutlass-dsl's `cutlass` package on sys.path where only the package's .pth would.

    The DSL ships `cutlass` under nvidia_cutlass_dsl/dsl_packages and adds that folder through a .pth
    file, which Python reads only in site directories: an install with `pip --target` (how the H200,
    which has no network, receives it) leaves `import cutlass` failing. Returns the folder added."""
    import importlib.util
    import os
    import sys

    try:
        spec = importlib.util.find_spec("nvidia_cutlass_dsl")
    except (ImportError, ValueError):
        return None
    for base in (spec.submodule_search_locations or []) if spec else []:
        folder = os.path.join(base, "dsl_packages")
        if os.path.isdir(os.path.join(folder, "cutlass")):
            if folder not in sys.path:
                sys.path.append(folder)
            return folder
    return None


def entry():
    """flash_attn.cute's flash_attn_varlen_func, or a one-line reason it cannot be imported."""
    dsl_on_path()
    try:
        from flash_attn.cute.interface import flash_attn_varlen_func
    except ImportError as exc:
        raise ImportError(f"flash_attn.cute not importable ({exc}); install flash-attn-4 with nvidia-cutlass-dsl "
                          "(docs/perf/fa4_prefill.md says how on the H200) to time it") from None
    except Exception as exc:  # the DSL refuses a GPU or misses a library at import
        raise RuntimeError(f"flash_attn.cute failed to import: {type(exc).__name__}: {str(exc)[:200]}") from None
    return flash_attn_varlen_func


def finite_tails(cache, page_table, kv_lens: list[int]):
    """A copy of a paged cache whose rows past each sequence's length, in its last page, are zero.

    Refuses a page two sequences use: zeroing one's tail could then erase the other's keys."""
    page = cache.shape[1]
    used: dict[int, int] = {}
    out = cache.clone()
    for n, length in enumerate(kv_lens):
        for p in page_table[n, : (length + page - 1) // page].tolist():
            if used.setdefault(int(p), n) != n:
                raise RuntimeError(f"page {p} is used by sequences {used[int(p)]} and {n}: not supported")
        if length % page:
            out[int(page_table[n, length // page]), length % page:] = 0
    return out


def paged_call(inputs: dict[str, Any], cu_seqlens_q, q_lens: list[int], scale: float):
    """The timed callable: one varlen call over the whole batch (JIT-compiled here, untimed)."""
    run = entry()
    kv_lens = inputs["kv_lens"].tolist()
    q, table = inputs["q"], inputs["page_table"]
    kc = finite_tails(inputs["k_cache"], table, kv_lens)
    vc = finite_tails(inputs["v_cache"], table, kv_lens)
    kw = dict(cu_seqlens_q=cu_seqlens_q, seqused_k=inputs["kv_lens"], page_table=table, softmax_scale=scale,
              causal=True, max_seqlen_q=max(q_lens), max_seqlen_k=max(kv_lens))

    def call():
        out = run(q, kc, vc, **kw)
        return out[0] if isinstance(out, tuple) else out  # (out, lse) in the versions seen

    call()  # this layout's JIT compile, outside the timing; a refusal surfaces here as a skip note
    call.note = (f"flash-attn-4 {_version('flash-attn-4')} (CuTe DSL {_version('nvidia-cutlass-dsl')}); one paged "
                 "varlen call, causal bottom-right; page tails zeroed in copies of the caches (untimed)")
    return call


def _version(dist: str) -> str:
    from importlib.metadata import version

    try:
        return version(dist)
    except Exception:
        return "?"
