"""Interpreter tests for kernels/fa4_decode/baseline.py against a float64 reference.

Small shapes (D = 256, few heads, a few 128-token pages): q_len 1 and 4, page-edge lengths,
ragged batches, GQA ratios, with and without split-KV, several CONFIG points.
TRITON_INTERPRET must be set before the kernel module is imported.
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
mod = importlib.import_module("kernels.fa4_decode.baseline")
shared = get_op("fa4_decode").reference  # the project's float64 / same-precision references
PLAIN_RATIO = get_op("fa4_decode").spec.tolerances["o"].plain_ratio

D = 256
PAGE = 128


def make_case(kv_lens, q_len, hq, hkv, seed=0, spare_pages=2, extra_cols=1):
    g = torch.Generator().manual_seed(seed)
    pages_per = [-(-kv // PAGE) for kv in kv_lens]
    max_pages = max(pages_per) + extra_cols  # wider than needed: the split policy sees an upper bound
    num_pages = sum(pages_per) + spare_pages
    perm = torch.randperm(num_pages, generator=g)
    page_table = torch.full((len(kv_lens), max_pages), -1, dtype=torch.int32)
    used = 0
    for i, np_ in enumerate(pages_per):
        page_table[i, :np_] = perm[used:used + np_].to(torch.int32)
        used += np_
    k_cache = torch.randn(num_pages, PAGE, hkv, D, generator=g).to(torch.bfloat16)
    v_cache = torch.randn(num_pages, PAGE, hkv, D, generator=g).to(torch.bfloat16)
    mask = torch.ones(num_pages, PAGE, dtype=torch.bool)
    for i, kv in enumerate(kv_lens):
        for j in range(pages_per[i]):
            mask[page_table[i, j], : min(PAGE, kv - j * PAGE)] = False
    k_cache[mask] = float("nan")  # unused slots: reading them poisons the output
    v_cache[mask] = float("nan")
    q = torch.randn(len(kv_lens) * q_len, hq, D, generator=g).to(torch.bfloat16)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, page_table=page_table,
                kv_lens=torch.tensor(kv_lens, dtype=torch.int32))


def rel_l2(o, ref):
    return ((o.double() - ref).norm() / ref.norm()).item()


def check(case, cfg=None, tol=1e-2):
    old = dict(mod.CONFIG)
    try:
        if cfg:
            mod.CONFIG.update(cfg)
        o = mod.fa4_decode(**case)
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


# Many splits on tiny inputs: SPLIT_TARGET high, short minimum chunk.
SPLITTY = dict(BLOCK_N=32, SPLIT_TARGET=64, MIN_SPLIT_TOKENS=32, REDUCE_BLOCK_S=4)
NOSPLIT = dict(BLOCK_N=64, SPLIT_TARGET=1)


@pytest.mark.parametrize("q_len", [1, 4])
@pytest.mark.parametrize("kv_lens", [[4], [127], [128], [129], [5, 300, 64, 1]],
                         ids=["len4", "len127", "len128", "len129", "ragged"])
@pytest.mark.parametrize("cfg", [SPLITTY, NOSPLIT], ids=["split", "nosplit"])
def test_lengths(kv_lens, q_len, cfg):
    kv_lens = [max(k, q_len) for k in kv_lens]
    check(make_case(kv_lens, q_len, hq=4, hkv=1, seed=sum(kv_lens) + q_len), cfg)


@pytest.mark.parametrize("hq,hkv", [(8, 1), (4, 2), (2, 2), (16, 1)])
@pytest.mark.parametrize("q_len", [1, 4])
def test_gqa(hq, hkv, q_len):
    check(make_case([200, 70], q_len, hq=hq, hkv=hkv, seed=hq * 10 + hkv), SPLITTY)


def test_len1_q1():
    check(make_case([1, 3], 1, hq=4, hkv=1, seed=5), SPLITTY)


@pytest.mark.parametrize("cfg", [
    dict(BLOCK_N=16, SPLIT_TARGET=8, MIN_SPLIT_TOKENS=16, REDUCE_BLOCK_S=8),
    dict(BLOCK_N=128, SPLIT_TARGET=4, MIN_SPLIT_TOKENS=128),
    dict(BLOCK_N=64, num_warps=8, num_stages=3),
    dict(BLOCK_N=32, num_warps_m64=8, SPLIT_POLICY="waves", CTAS_PER_SM=1, MIN_SPLIT_TOKENS=32),
], ids=["bn16", "bn128", "w8", "waves"])
def test_config_points(cfg):
    check(make_case([260, 129], 4, hq=4, hkv=1, seed=9), cfg)


@pytest.mark.parametrize("hq,q_len", [(4, 1), (16, 4)], ids=["m16", "m64"])
@pytest.mark.parametrize("qscale", [1.0, 12.0], ids=["plain", "peaky"])
def test_lazy_rescale(hq, q_len, qscale):
    # Peaky scores (large |q|) make the running max jump by far more than 2^8 mid-sequence.
    case = make_case([300, 45], q_len, hq=hq, hkv=1, seed=21)
    case["q"] = (case["q"].float() * qscale).to(torch.bfloat16)
    check(case, dict(LAZY_RESCALE=True, BLOCK_N=32, BLOCK_N_m64=16, SPLIT_TARGET=4, MIN_SPLIT_TOKENS=64))


@pytest.mark.parametrize("q_len", [1, 4])
@pytest.mark.parametrize("cfg", [dict(SPLITTY, USE_TMA=True), dict(NOSPLIT, BLOCK_N=32, USE_TMA=True),
                                 dict(SPLITTY, BLOCK_N=16, BLOCK_N_m64=16, USE_TMA=True)],
                         ids=["split", "nosplit", "bn16"])
def test_tma_blocks(q_len, cfg):
    # whole [BLOCK_N, D] boxes through descriptors: the NaN page tails and the next split's keys in
    # a block's last rows must not leak (scores masked, V rows zeroed); G 16 x q_len 4 = the m64 tile
    mod._LAST_DESCS.clear()
    check(make_case([5, 300, 128, 129], q_len, hq=16, hkv=1, seed=31 + q_len), cfg)
    assert mod._LAST_DESCS, "the descriptor path did not run"


@pytest.mark.parametrize("q_len", [1, 4])
@pytest.mark.parametrize("cfg", [dict(SPLITTY, FUSED_MERGE=True), dict(SPLITTY, FUSED_MERGE=True, USE_TMA=True),
                                 dict(SPLITTY, FUSED_MERGE=True, LAZY_RESCALE=True, BLOCK_N_m64=16)],
                         ids=["gather", "tma", "lazy"])
def test_fused_merge(q_len, cfg):
    # the last split program of each (sequence, KV head) merges: many splits, a one-split sequence,
    # NaN page tails, the 64-row tile (q_len 4 x G 16) merged in column blocks, GQA with 2 KV heads
    check(make_case([5, 300, 128, 129], q_len, hq=16, hkv=1, seed=41 + q_len), cfg)
    check(make_case([200, 70], q_len, hq=8, hkv=2, seed=43 + q_len), cfg)


def test_tma_falls_back_when_blocks_cross_pages():
    # BLOCK_N 96 does not divide the 128-token page: the plan keeps the pointer gather
    cfg = dict(mod.CONFIG, USE_TMA=True, BLOCK_N=96)
    plan = mod._plan(cfg, 2, 4, D, PAGE, 1, 2, 3, torch.device("cpu"), None)
    assert plan[4]["USE_TMA"] is False
    assert mod._plan(dict(cfg, BLOCK_N=32), 2, 4, D, PAGE, 1, 2, 3, torch.device("cpu"), None)[4]["USE_TMA"]
    assert not mod._plan(dict(cfg, BLOCK_N=32), 2, 4, D, PAGE, 1, 2, 3, torch.device("cpu"), None, False)[4]["USE_TMA"]


def test_split_policy_from_shapes():
    target = dict(mod.CONFIG, SPLIT_POLICY="target", SPLIT_TARGET=264)
    assert mod.num_splits_for(1, 1, 32768, target) == 128  # capped by MIN_SPLIT_TOKENS (256)
    assert mod.num_splits_for(64, 1, 32768, target) == 5
    assert mod.num_splits_for(300, 1, 32768, target) == 1
    waves = dict(mod.CONFIG, SPLIT_POLICY="waves", CTAS_PER_SM=2, SPLIT_OVERHEAD_TOKENS=256)
    for b in (1, 16, 32, 64, 128):  # never spills a few programs into an extra wave
        s = mod.num_splits_for(b, 1, 32768, waves, num_sms=132)
        assert b * s <= 264 or b * s % 264 == 0 or s == 1, (b, s)


def test_scale():
    case = make_case([90], 4, hq=4, hkv=1, seed=2)
    o = mod.fa4_decode(**case, softmax_scale=0.2)
    assert rel_l2(o, shared.reference(**case, softmax_scale=0.2)[0]) <= 1e-2


@pytest.mark.slow
def test_long_default_config():
    check(make_case([2000, 700], 4, hq=8, hkv=1, seed=13))


def balanced_model(kv_lens, heads, slots, block_n, min_chunk, overhead):
    """The 'balanced' chunk as _split_chunk documents it, in plain Python (before the per-sequence
    lower bound): of the fair-share grid and the even cuts of the longest sequence, the first c
    minimising waves(c) x (c + overhead)."""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    fair = cdiv(max(cdiv(heads * sum(kv_lens), slots), min_chunk), block_n) * block_n
    cands = [fair] + [cdiv(fair * (8 + k) // 8, block_n) * block_n for k in range(1, 9)]
    k0 = cdiv(max(kv_lens), fair)
    cands += [cdiv(cdiv(max(kv_lens), max(k0 - j, 1)), block_n) * block_n for j in range(8)]
    cost = lambda c: cdiv(heads * sum(cdiv(n, c) for n in kv_lens), slots) * (c + overhead)  # noqa: E731
    return min(cands, key=lambda c: (cost(c), cands.index(c)))  # the first of equal costs, as the kernel


@pytest.mark.parametrize("kv_lens,heads,slots,overhead", [
    ([7347, 19486, 3911, 32198, 4096, 25782], 1, 264, 256),  # ragged: the fair share leaves a 2nd wave
    ([32768] * 16, 1, 264, 256),  # uniform: one full wave
    ([4096] * 128, 2, 132, 0),
    ([5], 1, 264, 1024),  # tiny: the minimum chunk
])
def test_balanced_chunk_is_what_every_program_computes(kv_lens, heads, slots, overhead):
    import triton
    import triton.language as tl

    @triton.jit
    def probe(KVL, OUT, NUM_SPLITS, BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr, SLOTS: tl.constexpr,
              MIN_CHUNK: tl.constexpr, OVERHEAD: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)
        c = mod._split_chunk(KVL, tl.load(KVL + b), tl.num_programs(0), tl.num_programs(1), NUM_SPLITS, BLOCK_N,
                             True, BLOCK_B, SLOTS, MIN_CHUNK, OVERHEAD)
        tl.store(OUT + b * tl.num_programs(1) + h, c)

    lens = torch.tensor(kv_lens, dtype=torch.int32)
    out = torch.zeros(len(kv_lens) * heads, dtype=torch.int32)
    probe[(len(kv_lens), heads)](lens, out, 1 << 20, BLOCK_N=64, BLOCK_B=triton.next_power_of_2(len(kv_lens)),
                                 SLOTS=slots, MIN_CHUNK=256, OVERHEAD=overhead)
    want = balanced_model(kv_lens, heads, slots, 64, 256, overhead)
    assert out.tolist() == [max(want, 64)] * len(out)  # NUM_SPLITS 2^20: the per-sequence bound is one block
    if len(kv_lens) == 6:  # the D6-like batch: one wave of chunks near the fair share, not 8 per sequence
        assert heads * sum(-(-n // want) for n in kv_lens) <= slots and want <= 2 * sum(kv_lens) // slots + 64


BALANCED = dict(SPLIT_POLICY="balanced", SPLIT_TARGET=1056, MIN_SPLIT_TOKENS=16, BLOCK_N=16, BLOCK_N_m64=16,
                CTAS_PER_SM=1, SPLIT_OVERHEAD_TOKENS=32, REDUCE_BLOCK_S=8)


@pytest.mark.parametrize("q_len", [1, 4])
@pytest.mark.parametrize("tma", [False, True], ids=["gather", "tma"])
def test_balanced_policy(q_len, tma):
    # a ragged batch whose long sequence the host would cut into 16-key splits; the kernels lengthen
    # the chunk from the real lengths (the merge must agree), with NaN page tails and spare pages
    kv = [2500, 130, 900, 33]
    cfg = dict(BALANCED, USE_TMA=tma)
    splits = mod.num_splits_for(len(kv), 1, (max(-(-n // PAGE) for n in kv) + 1) * PAGE, dict(mod.CONFIG, **cfg))
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    per_seq = cdiv(cdiv(kv[0], splits), 16) * 16
    assert balanced_model(kv, 1, 132, 16, 16, 32) > per_seq  # the balancing is what this shape exercises
    check(make_case(kv, q_len, hq=16 if q_len == 4 else 4, hkv=1, seed=51 + q_len), cfg)


def test_balanced_policy_gqa_two_kv_heads():
    check(make_case([700, 64, 260], 1, hq=8, hkv=2, seed=55), BALANCED)
