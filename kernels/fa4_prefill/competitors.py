"""External fa4_prefill implementations the harness times beside ours (trusted code, not a kernel).

sdpa: torch's scaled_dot_product_attention on the same data gathered to a dense layout. The gather
happens here, outside the timed callable. Sequences with equal (new tokens, prefix) go in one
batched call; a ragged batch is a loop of calls (launch gaps included, as a caller would pay them).
No prefix: is_causal=True. With a prefix: torch's bottom-right CausalBias (causal_lower_right),
else an explicit boolean mask when this torch refuses it. KV heads are repeated to the query heads
outside the timed call (the layout the H200 measurement of 535 TFLOP/s used; enable_gqa may route to
the math backend, which at T = 32k would materialise a 64 GB score matrix); enable_gqa=True only
when the repeated variant is refused.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from aka.contract.ops import load_module

_lib = load_module(Path(__file__).resolve().parents[1] / "_shared" / "paged.py", "aka_kernels_shared_paged")


def _mask_variants(ql: int, kv: int, device):
    if ql == kv:
        return [("is_causal", {"is_causal": True})]
    out = []
    try:
        from torch.nn.attention.bias import causal_lower_right

        out.append(("CausalBias lower-right", {"attn_mask": causal_lower_right(ql, kv)}))
    except ImportError:
        pass
    pos = torch.arange(kv - ql, kv, device=device)
    out.append(("boolean mask", {"attn_mask": torch.arange(kv, device=device)[None, :] <= pos[:, None]}))
    return out


def _group_call(q, k, v, mask_kw, gqa: bool, scale):
    if gqa:
        return lambda: F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True, **mask_kw)
    rep = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    return lambda: F.scaled_dot_product_attention(q, kr, vr, scale=scale, **mask_kw)


def _first_working(q, k, v, ql, kv, scale):
    """The first variant this torch accepts, tried once untimed: (callable, description)."""
    errors = []
    for mask_name, mask_kw in _mask_variants(ql, kv, q.device):
        for gqa in (False, True):  # repeated heads first: measured on flash at 535 TFLOP/s (DESIGN.md)
            call = _group_call(q, k, v, mask_kw, gqa, scale)
            try:
                call()
            except (RuntimeError, TypeError, NotImplementedError) as exc:
                errors.append(f"{mask_name}/{'gqa' if gqa else 'repeat'}: {str(exc).splitlines()[0][:80]}")
                continue
            return call, f"{mask_name}, {'enable_gqa' if gqa else 'K/V repeated to Hq'}"
    raise RuntimeError("torch SDPA refused every variant: " + "; ".join(errors))


def sdpa(inputs: dict):
    """Dense SDPA over gathered K/V; returns the timed callable (writes the packed output)."""
    q_all, kc, vc, table = inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["page_table"]
    cu = inputs["cu_seqlens_q"].tolist()
    kv_lens = inputs["kv_lens"].tolist()
    scale = inputs.get("softmax_scale") or _lib.default_scale(q_all.shape[-1])
    groups: dict[tuple[int, int], list[int]] = {}
    for n, kv in enumerate(kv_lens):
        groups.setdefault((cu[n + 1] - cu[n], kv), []).append(n)
    hq, d = q_all.shape[1], q_all.shape[2]
    out = torch.empty_like(q_all)
    calls, how = [], set()
    for (ql, kv), seqs in groups.items():
        if ql == 0:
            continue
        k = torch.stack([_lib.gather(kc, table[n], kv) for n in seqs]).transpose(1, 2).contiguous()
        v = torch.stack([_lib.gather(vc, table[n], kv) for n in seqs]).transpose(1, 2).contiguous()
        idx = torch.cat([torch.arange(cu[n], cu[n + 1]) for n in seqs]).to(q_all.device)
        q = q_all[idx].view(len(seqs), ql, hq, d).transpose(1, 2).contiguous()
        call, desc = _first_working(q, k, v, ql, kv, scale)
        how.add(desc)
        calls.append((call, idx, len(seqs) * ql))

    def run():
        for call, idx, rows in calls:
            out[idx] = call().transpose(1, 2).reshape(rows, hq, d)
        return out

    run.note = (f"torch {torch.__version__} SDPA, dense gather untimed, {len(calls)} call(s) per run "
                f"(one per equal-length group); {'; '.join(sorted(how))}; scatter into packed output timed")
    return run


_cute = load_module(Path(__file__).resolve().parents[1] / "_shared" / "fa4_cute.py", "aka_kernels_shared_fa4_cute")


def flash_attn4(inputs: dict):
    """FlashAttention-4's paged varlen kernel on the contract's inputs (kernels/_shared/fa4_cute.py)."""
    cu = inputs["cu_seqlens_q"]
    starts = cu.tolist()
    q_lens = [b - a for a, b in zip(starts, starts[1:])]
    scale = inputs.get("softmax_scale") or _lib.default_scale(inputs["q"].shape[-1])
    return _cute.paged_call(inputs, cu, q_lens, scale)
