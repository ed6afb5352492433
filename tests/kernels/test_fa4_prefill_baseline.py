"""Interpreter tests for kernels/fa4_prefill/baseline.py against a float64 reference.

Small shapes (D = 256 as in the contract, few heads, a few pages) so the CPU interpreter
finishes quickly; page-edge lengths, cached prefixes, ragged batches, GQA ratios and several
CONFIG points. TRITON_INTERPRET must be set before the kernel module is imported.
"""

from __future__ import annotations

import importlib
import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from aka.contract.ops import get_op  # noqa: E402
from aka.evaluate.host.interp import install_bf16_dot_shim  # noqa: E402

install_bf16_dot_shim()
mod = importlib.import_module("kernels.fa4_prefill.baseline")
shared = get_op("fa4_prefill").reference  # the project's float64 / same-precision references
PLAIN_RATIO = get_op("fa4_prefill").spec.tolerances["o"].plain_ratio

D = 256
PAGE = 64


def make_case(q_lens, prefixes, hq, hkv, seed=0, spare_pages=3):
    g = torch.Generator().manual_seed(seed)
    kv_lens = [p + q for p, q in zip(prefixes, q_lens)]
    pages_per = [-(-kv // PAGE) for kv in kv_lens]
    max_pages = max(pages_per)
    num_pages = sum(pages_per) + spare_pages
    perm = torch.randperm(num_pages, generator=g)
    page_table = torch.full((len(q_lens), max_pages), -1, dtype=torch.int32)  # unused slots poisoned
    used = 0
    for i, np_ in enumerate(pages_per):
        page_table[i, :np_] = perm[used:used + np_].to(torch.int32)
        used += np_
    k_cache = torch.randn(num_pages, PAGE, hkv, D, generator=g).to(torch.bfloat16)
    v_cache = torch.randn(num_pages, PAGE, hkv, D, generator=g).to(torch.bfloat16)
    # Unused slots (spare pages, tails past kv_len) hold NaN: a kernel reading them fails loudly.
    mask = torch.ones(num_pages, PAGE, dtype=torch.bool)
    for i, kv in enumerate(kv_lens):
        for j in range(pages_per[i]):
            n = min(PAGE, kv - j * PAGE)
            mask[page_table[i, j], :n] = False
    k_cache[mask] = float("nan")
    v_cache[mask] = float("nan")
    q = torch.randn(sum(q_lens), hq, D, generator=g).to(torch.bfloat16)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table,
                cu_seqlens_q=cu, kv_lens=torch.tensor(kv_lens, dtype=torch.int32))


def rel_l2(o, ref):
    return ((o.double() - ref).norm() / ref.norm()).item()


def check(case, cfg=None, tol=1e-2):
    old = dict(mod.CONFIG)
    try:
        if cfg:
            mod.CONFIG.update(cfg)
        o = mod.fa4_prefill(**case)
    finally:
        mod.CONFIG.clear()
        mod.CONFIG.update(old)
    assert o.shape == case["q"].shape and o.dtype == torch.bfloat16
    assert torch.isfinite(o).all()
    ref = shared.reference(**case)[0]
    err = rel_l2(o, ref)
    assert err <= tol, err
    # no worse than the contract's plain_ratio x a plain bf16-operand / fp32-softmax implementation
    assert err <= PLAIN_RATIO * rel_l2(shared.plain(**case)[0], ref) + 1e-4, err
    return err


SMALL = dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1, USE_TMA=False, WARP_SPEC=False)


@pytest.mark.parametrize("q_lens,prefixes", [
    ([1], [0]),
    ([63], [0]),
    ([65], [0]),
    ([129], [0]),
    ([40, 1, 64], [0, 0, 0]),
    ([17, 70], [50, 64]),
], ids=["len1", "len63", "len65", "len129", "ragged", "prefix"])
def test_page_edges(q_lens, prefixes):
    check(make_case(q_lens, prefixes, hq=2, hkv=1), SMALL)


@pytest.mark.parametrize("hq,hkv", [(4, 1), (4, 2), (2, 2)])
def test_gqa(hq, hkv):
    check(make_case([33, 20], [30, 0], hq=hq, hkv=hkv, seed=hq + hkv), SMALL)


@pytest.mark.parametrize("cfg", [
    dict(BLOCK_M=32, BLOCK_N=32, PACK_GQA=True),
    dict(BLOCK_M=16, BLOCK_N=64, SPLIT_CAUSAL=False),
    dict(BLOCK_M=32, BLOCK_N=16, USE_TMA=True),
    dict(BLOCK_M=32, BLOCK_N=64, PACK_GQA=True, USE_TMA=True),
    dict(BLOCK_M=32, BLOCK_N=128, USE_TMA=True, WARP_SPEC=True),  # BLOCK_N > page: pointer fallback
], ids=["pack", "nosplit", "tma", "pack_tma", "tma_fallback"])
def test_config_points(cfg):
    check(make_case([9, 70], [64, 3], hq=4, hkv=1, seed=7), dict(SMALL, **cfg))


def test_scale_and_default_config():
    case = make_case([20], [44], hq=2, hkv=1, seed=3)
    o = mod.fa4_prefill(**case, softmax_scale=0.1)
    assert rel_l2(o, shared.reference(**case, softmax_scale=0.1)[0]) <= 1e-2


@pytest.mark.slow
def test_long_default_config():
    check(make_case([300, 129], [100, 0], hq=2, hkv=1, seed=11))
