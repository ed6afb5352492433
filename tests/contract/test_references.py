"""Make the float64 references trustworthy by checking them against independent formulations."""

import pytest
import torch
import torch.nn.functional as F

from aka.contract.ops import get_op
from aka.contract.spec import ShapeCaseBase

GDN = get_op("gdn_prefill")
PREFILL = get_op("fa4_prefill")
DECODE = get_op("fa4_decode")


def _case(op, **params) -> ShapeCaseBase:
    model = type(op.cases("smoke")[0])
    return model(id="T", **params)


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("hk,hv,lens,state", [(1, 2, [150], False), (2, 4, [1, 64, 65, 130], True), (2, 2, [63], True)])
def test_gdn_recurrence_matches_chunked_form(hk, hv, lens, state):
    x = GDN.inputs.make_inputs(_case(GDN, hk=hk, hv=hv, seqlens=lens, initial_state=state), seed=3)
    o, s = GDN.reference.reference(**x)
    for chunk in (16, 64):
        o2, s2 = GDN.reference.chunked(**x, chunk=chunk)
        assert _rel(o2, o) < 1e-12 and _rel(s2, s) < 1e-12


@pytest.mark.parametrize("case", ["ragged_h0", "strong_decay", "correlated_keys", "empty_sequence"])
def test_gdn_reference_chunked_algorithm_equals_the_recurrence(case):
    # what the gate uses on a GPU (reference(algorithm="auto") on CUDA tensors) against the token loop
    lens = {"empty_sequence": [65, 0, 3]}.get(case, [1, 63, 64, 65, 130])
    x = GDN.inputs.make_inputs(_case(GDN, hk=2, hv=4, seqlens=lens, initial_state=case != "strong_decay"), seed=11)
    if case == "strong_decay":
        x["g"] = x["g"] * 40  # per-token decay down to e^-600: exp underflow inside a chunk
    if case == "correlated_keys":
        u = F.normalize(torch.randn(1, 2, x["k"].shape[-1], generator=torch.Generator().manual_seed(1)), dim=-1)
        x["k"] = F.normalize(0.95 * u + 0.05 * x["k"].float(), dim=-1).to(x["k"].dtype)
        x["beta"] = (0.5 + 0.5 * x["beta"]).contiguous()
    o, s = GDN.reference.reference(**x, algorithm="recurrence")
    o2, s2 = GDN.reference.reference(**x, algorithm="chunked")
    assert o2.dtype == torch.float64 and o2.shape == o.shape and s2.shape == s.shape
    assert _rel(o2, o) < 1e-12 and _rel(s2, s) < 1e-12
    assert torch.equal(GDN.reference.reference(**x)[0], o)  # "auto" on CPU tensors: the recurrence


def test_gdn_reference_rejects_an_unknown_algorithm():
    x = GDN.inputs.make_inputs(_case(GDN, hk=1, hv=1, seqlens=[3]), seed=1)
    with pytest.raises(ValueError, match="algorithm"):
        GDN.reference.reference(**x, algorithm="fast")


def test_gdn_initial_state_equals_running_two_halves():
    x = GDN.inputs.make_inputs(_case(GDN, hk=1, hv=2, seqlens=[90]), seed=5)
    o, s = GDN.reference.reference(**x)
    cut = 37

    def part(a, b, state):
        y = {k: x[k][a:b] for k in ("q", "k", "v", "g", "beta")}
        return GDN.reference.reference(**y, cu_seqlens=torch.tensor([0, b - a], dtype=torch.int32),
                                       initial_state=state)

    o1, s1 = part(0, cut, None)
    o2, s2 = part(cut, 90, s1)
    assert _rel(torch.cat([o1, o2]), o) < 1e-13
    assert _rel(s2, s) < 1e-13


def test_gdn_varlen_batch_equals_separate_calls():
    x = GDN.inputs.make_inputs(_case(GDN, hk=1, hv=2, seqlens=[5, 70, 1], initial_state=True), seed=7)
    o, s = GDN.reference.reference(**x)
    cu = x["cu_seqlens"].tolist()
    for n, (a, b) in enumerate(zip(cu[:-1], cu[1:])):
        y = {k: x[k][a:b] for k in ("q", "k", "v", "g", "beta")}
        on, sn = GDN.reference.reference(**y, cu_seqlens=torch.tensor([0, b - a], dtype=torch.int32),
                                         initial_state=x["initial_state"][n:n + 1])
        assert torch.equal(on, o[a:b]) and torch.equal(sn[0], s[n])


def test_gdn_plain_is_close_but_not_exact():
    x = GDN.inputs.make_inputs(GDN.cases("S2")[0], seed=1)
    o, s = GDN.reference.reference(**x)
    po, ps = GDN.reference.plain(**x)
    assert po.dtype == torch.bfloat16 and ps.dtype == torch.float32
    assert 1e-4 < _rel(po, o) < 1e-2 and _rel(ps, s) < 5e-3


def _dense_sdpa(x, seq, q_rows, kv_len, scale):
    """Float64 SDPA on a contiguous gather: bottom-right causal via an explicit mask."""
    pages = x["page_table"][seq].long()
    page = x["k_cache"].shape[1]
    n = -(-kv_len // page)
    K = x["k_cache"][pages[:n]].flatten(0, 1)[:kv_len].double()  # [L, Hkv, D]
    V = x["v_cache"][pages[:n]].flatten(0, 1)[:kv_len].double()
    q = q_rows.double()  # [ql, Hq, D]
    ql, hq = q.shape[0], q.shape[1]
    pos = kv_len - ql + torch.arange(ql)
    mask = torch.arange(kv_len)[None, :] <= pos[:, None]
    out = F.scaled_dot_product_attention(q.transpose(0, 1), K.transpose(0, 1), V.transpose(0, 1),
                                         attn_mask=mask, scale=scale, enable_gqa=True)
    assert out.shape == (hq, ql, q.shape[2])
    return out.transpose(0, 1)


@pytest.mark.parametrize("case_id", ["S2", "E3", "E4", "E5"])
def test_prefill_reference_matches_sdpa(case_id):
    x = PREFILL.inputs.make_inputs(PREFILL.cases(case_id)[0], seed=11)
    (o,) = PREFILL.reference.reference(**x)
    cu, kv = x["cu_seqlens_q"].tolist(), x["kv_lens"].tolist()
    for n in range(len(kv)):
        want = _dense_sdpa(x, n, x["q"][cu[n]:cu[n + 1]], kv[n], 256 ** -0.5)
        assert _rel(o[cu[n]:cu[n + 1]], want) < 1e-12


@pytest.mark.parametrize("case_id", ["S1", "S2", "E3", "E4"])
def test_decode_reference_matches_sdpa(case_id):
    case = DECODE.cases(case_id)[0]
    x = DECODE.inputs.make_inputs(case, seed=12)
    (o,) = DECODE.reference.reference(**x, softmax_scale=0.1)
    ql = case.q_len
    for b, L in enumerate(x["kv_lens"].tolist()):
        want = _dense_sdpa(x, b, x["q"][b * ql:(b + 1) * ql], L, 0.1)
        assert _rel(o[b * ql:(b + 1) * ql], want) < 1e-12


def _reshuffle(x):
    """Move every used page to a fresh slot of a larger pool; the result must not change."""
    kc, vc, table = x["k_cache"], x["v_cache"], x["page_table"]
    pool = kc.shape[0]
    perm = torch.randperm(pool * 2, generator=torch.Generator().manual_seed(0))[:pool]
    k2 = torch.full((pool * 2, *kc.shape[1:]), 7.0, dtype=kc.dtype)
    v2 = torch.full((pool * 2, *vc.shape[1:]), -7.0, dtype=vc.dtype)
    k2[perm] = kc
    v2[perm] = vc
    return {**x, "k_cache": k2, "v_cache": v2, "page_table": perm[table.long()].to(torch.int32)}


@pytest.mark.parametrize("op,case_id", [(PREFILL, "E4"), (DECODE, "S2")])
def test_shuffling_pages_does_not_change_result(op, case_id):
    x = op.inputs.make_inputs(op.cases(case_id)[0], seed=2)
    (o,) = op.reference.reference(**x)
    (o2,) = op.reference.reference(**_reshuffle(x))
    assert torch.equal(o, o2)


def test_prefill_varlen_batch_equals_separate_calls():
    x = PREFILL.inputs.make_inputs(PREFILL.cases("E4")[0], seed=4)
    (o,) = PREFILL.reference.reference(**x)
    cu = x["cu_seqlens_q"].tolist()
    for n in range(len(cu) - 1):
        one = {**x, "q": x["q"][cu[n]:cu[n + 1]], "page_table": x["page_table"][n:n + 1],
               "cu_seqlens_q": torch.tensor([0, cu[n + 1] - cu[n]], dtype=torch.int32),
               "kv_lens": x["kv_lens"][n:n + 1]}
        (on,) = PREFILL.reference.reference(**one)
        assert torch.equal(on, o[cu[n]:cu[n + 1]])


def test_decode_drafts_are_causal_among_themselves():
    case = DECODE.cases("S2")[0]
    x = DECODE.inputs.make_inputs(case, seed=9)
    (o,) = DECODE.reference.reference(**x)
    # Changing the last cached token (the 4th draft's own key) moves only the last draft's output.
    L0 = x["kv_lens"][0].item()
    page = x["k_cache"].shape[1]
    pid = x["page_table"][0, (L0 - 1) // page].item()
    k2 = x["k_cache"].clone()
    k2[pid, (L0 - 1) % page] += 3.0
    (o2,) = DECODE.reference.reference(**{**x, "k_cache": k2})
    assert torch.equal(o2[0:3], o[0:3]) and not torch.equal(o2[3], o[3])


def test_inputs_are_deterministic_and_realistic():
    case = GDN.cases("S2")[0]
    a, b = GDN.inputs.make_inputs(case, seed=1), GDN.inputs.make_inputs(case, seed=1)
    c = GDN.inputs.make_inputs(case, seed=2)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["q"], c["q"])
    norms = a["q"].float().norm(dim=-1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-2)
    assert (a["g"] <= 0).all() and ((a["beta"] > 0) & (a["beta"] < 1)).all()
    p = PREFILL.inputs.make_inputs(PREFILL.cases("E3")[0], seed=1)
    table = p["page_table"]
    used = [table[n, : -(-L // 64)] for n, L in enumerate(p["kv_lens"].tolist())]
    ids = torch.cat(used)
    assert len(set(ids.tolist())) == len(ids) and ids.max() < p["k_cache"].shape[0]
    assert p["k_cache"].shape[0] > len(ids)  # unused pages stay in the pool
    assert not torch.equal(ids.sort().values, ids)  # shuffled, not contiguous
