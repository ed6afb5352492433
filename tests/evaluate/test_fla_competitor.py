"""The fla competitor's preparation against a stand-in fla package (the real one needs a GPU).

The stand-in enforces fla's calling convention (batch axis of 1, int64 cu_seqlens, FLA_FLASH_QLA=0)
and, like older fla, rejects grouped values (fewer q/k heads than v heads). It computes with the
float64 reference, so the test proves the competitor's layout conversion and q/k repetition give
the op's function.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from aka.contract.ops import get_op
from aka.evaluate.host.loader import prepare
from aka.evaluate.parent.impls import resolve
from aka.evaluate.wire import BenchPayload

FAKE = '''
import os
import torch
from aka.contract.ops import get_op

CALLS = []

def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           cu_seqlens=None, **kw):
    assert os.environ["FLA_FLASH_QLA"] == "0"
    assert q.dim() == 4 and q.shape[0] == 1 and cu_seqlens.dtype == torch.int64
    if q.shape[2] != v.shape[2]:
        raise AssertionError("this fla has no grouped values")
    CALLS.append(1)
    ref = get_op("gdn_prefill").reference.reference
    o, ht = ref(q[0], k[0], v[0], g[0], beta[0], cu_seqlens.to(torch.int32), initial_state, scale)
    return o.to(torch.bfloat16)[None], ht.float()
'''


@pytest.fixture
def fake_fla(tmp_path, monkeypatch):
    pkg = tmp_path / "fla" / "ops" / "gated_delta_rule"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "fla", tmp_path / "fla" / "ops"):
        (d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(textwrap.dedent(FAKE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("FLA_FLASH_QLA", raising=False)
    for name in [m for m in sys.modules if m == "fla" or m.startswith("fla.")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [m for m in sys.modules if m == "fla" or m.startswith("fla.")]:
        sys.modules.pop(name, None)


def test_fla_competitor_converts_layouts_and_repeats_qk_heads(fake_fla):
    op = get_op("gdn_prefill")
    (ref,), _ = resolve(op, ["fla"])
    case = op.cases("S2")[0]  # two sequences, initial state, hv = 2 * hk
    inputs = op.inputs.make_inputs(case, 0, "cpu")
    call = prepare(ref, inputs)
    assert "q/k repeated to 2 heads" in call.note and "Triton" in call.note
    o, ht = call()
    want_o, want_ht = op.reference.reference(**inputs)
    assert o.shape == (1, *inputs["v"].shape)
    assert ((o[0].double() - want_o).norm() / want_o.norm()).item() < 1e-2
    assert ((ht.double() - want_ht).norm() / want_ht.norm()).item() < 1e-5


def test_fla_competitor_refuses_flashqla(fake_fla, monkeypatch):
    monkeypatch.setenv("FLA_FLASH_QLA", "1")
    op = get_op("gdn_prefill")
    (ref,), _ = resolve(op, ["fla"])
    with pytest.raises(RuntimeError, match="FLA_FLASH_QLA=1"):
        prepare(ref, op.inputs.make_inputs(op.cases("S1")[0], 0, "cpu"))


FAKE_QLA = '''
import torch
from aka.contract.ops import get_op

def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           cu_seqlens=None, **kw):
    assert q.dim() == 4 and q.shape[0] == 1 and cu_seqlens.dtype == torch.int64
    assert v.shape[2] % k.shape[2] == 0  # grouped values taken as they are
    ref = get_op("gdn_prefill").reference.reference
    o, ht = ref(q[0], k[0], v[0], g[0], beta[0], cu_seqlens.to(torch.int32), initial_state, scale)
    return o.to(torch.bfloat16)[None], ht.float()
'''


def test_flashqla_competitor_converts_layouts(tmp_path, monkeypatch):
    pkg = tmp_path / "flash_qla"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(FAKE_QLA))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "flash_qla", raising=False)
    op = get_op("gdn_prefill")
    (ref,), _ = resolve(op, ["flashqla"])
    inputs = op.inputs.make_inputs(op.cases("S2")[0], 0, "cpu")
    call = prepare(ref, inputs)
    assert call.note.startswith("FlashQLA ") and "grouped values as given" in call.note
    o, ht = call()
    want_o, want_ht = op.reference.reference(**inputs)
    assert ((o[0].double() - want_o).norm() / want_o.norm()).item() < 1e-2
    assert ((ht.double() - want_ht).norm() / want_ht.norm()).item() < 1e-5
    sys.modules.pop("flash_qla", None)


def test_a_missing_flashqla_is_a_one_line_skip():
    from aka.evaluate.checker.verify import bench_worker

    op = get_op("gdn_prefill")
    refs, _ = resolve(op, ["baseline", "flashqla"])
    cfg = {"warmup": 1, "min_iters": 1, "max_iters": 1, "input_copies": 1, "graph": False}
    res = bench_worker(BenchPayload(op=op.name, impls=refs, shapes="S1", config=cfg, force_cpu=True)).model_dump()
    cell = res["rows"][0]["results"]["flashqla"]
    assert cell["skipped"].startswith("ImportError: flash_qla not importable") and "\n" not in cell["skipped"]
    assert "eager" in res["rows"][0]["results"]["baseline"]
