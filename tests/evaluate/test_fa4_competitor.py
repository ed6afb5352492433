"""FlashAttention-4 (flash-attn-4's CuTe kernels) as the paged attention ops' competitor, on CPU.

The real package needs an sm90/sm100 GPU; here a stand-in `flash_attn.cute.interface` computes its
documented contract (paged varlen, causal bottom-right) with the prefill reference and refuses what
the real kernel cannot take (NaN rows in a sequence's last page), so these tests check the adapter's
layout mapping for both ops, the tail zeroing, and the skip when the package is missing."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from aka.contract.ops import get_op
from aka.evaluate.host.loader import prepare
from aka.evaluate.parent.impls import resolve
from aka.evaluate.wire import BenchPayload

FAKE = '''
import torch
from aka.contract.ops import get_op

calls = []


def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, seqused_k=None, page_table=None, softmax_scale=None,
                           causal=False, max_seqlen_q=None, max_seqlen_k=None, **kw):
    assert causal and page_table.dtype == torch.int32 and q.dim() == 3
    page = k.shape[1]
    lens = seqused_k.tolist()
    starts = cu_seqlens_q.tolist()
    assert max_seqlen_q == max(b - a for a, b in zip(starts, starts[1:])) and max_seqlen_k == max(lens)
    for n, L in enumerate(lens):  # a TMA page load reads the whole last page
        pages = page_table[n, : (L + page - 1) // page].long()
        assert torch.isfinite(k[pages].float()).all() and torch.isfinite(v[pages].float()).all(), n
    calls.append(len(lens))
    ref = get_op("fa4_prefill").reference.reference
    (o,) = ref(q, k, v, page_table, cu_seqlens_q, seqused_k, softmax_scale)
    return o.to(torch.bfloat16), None
'''


@pytest.fixture
def fake_fa4(tmp_path, monkeypatch):
    pkg = tmp_path / "flash_attn" / "cute"
    pkg.mkdir(parents=True)
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "interface.py").write_text(textwrap.dedent(FAKE))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("flash_attn", "flash_attn.cute", "flash_attn.cute.interface"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    yield
    for name in ("flash_attn", "flash_attn.cute", "flash_attn.cute.interface"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("op_name,shapes", [("fa4_prefill", "S2,E3,E4"), ("fa4_decode", "S1,S2,E3")])
def test_flash_attn4_adapter_computes_the_op(fake_fa4, op_name, shapes):
    op = get_op(op_name)
    (ref,), _ = resolve(op, ["flash_attn4"])
    for case in op.cases(shapes):
        inputs = op.inputs.make_inputs(case, 0, "cpu")
        call = prepare(ref, inputs)
        assert call.note.startswith("flash-attn-4 ") and "page tails zeroed" in call.note
        out = call().double()
        want = op.reference.reference(**inputs)[0]
        err = ((out - want).norm() / want.norm()).item()
        assert err < 1e-2, f"{op_name} {case.id}: rel L2 {err:.2e}"
        # the caller's caches keep their NaN tails: the zeroed rows are in the adapter's copies
        assert torch.isnan(inputs["k_cache"].float()).any()


def test_finite_tails_refuses_a_shared_page():
    from aka.contract.ops import load_module, project_root

    cute = load_module(project_root() / "kernels" / "_shared" / "fa4_cute.py", "t_fa4_cute")
    cache = torch.zeros(4, 8, 1, 2)
    table = torch.tensor([[1, 2], [2, 3]], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="page 2 is used by sequences 0 and 1"):
        cute.finite_tails(cache, table, [12, 12])
    cache[2, 4:] = float("nan")
    fixed = cute.finite_tails(cache, table[:1], [12])
    assert torch.isfinite(fixed).all() and torch.isnan(cache[2, 4:]).all()


def test_a_missing_flash_attn4_is_a_one_line_skip(monkeypatch):
    from aka.evaluate.checker.verify import bench_worker

    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import fails as on a machine without it
    op = get_op("fa4_decode")
    refs, _ = resolve(op, ["baseline", "flash_attn4"])
    cfg = {"warmup": 1, "min_iters": 1, "max_iters": 1, "input_copies": 1, "graph": False}
    res = bench_worker(BenchPayload(op=op.name, impls=refs, shapes="S1", config=cfg, force_cpu=True)).model_dump()
    cell = res["rows"][0]["results"]["flash_attn4"]
    assert cell["skipped"].startswith("ImportError: flash_attn.cute not importable") and "\n" not in cell["skipped"]


def test_dsl_found_without_its_pth(tmp_path, monkeypatch):
    """A `pip --target` install skips the DSL's .pth (seen on the H200, 2026-12-03): the adapter adds
    nvidia_cutlass_dsl/dsl_packages itself, so `import cutlass` inside flash_attn.cute resolves."""
    from aka.contract.ops import load_module, project_root

    cute = load_module(project_root() / "kernels" / "_shared" / "fa4_cute.py", "t_fa4_cute_dsl")
    pkg = tmp_path / "nvidia_cutlass_dsl"
    (pkg / "dsl_packages" / "cutlass").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "dsl_packages" / "cutlass" / "__init__.py").write_text("MARK = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))  # the adapter's append is undone after the test
    for name in ("nvidia_cutlass_dsl", "cutlass"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError):
        import cutlass  # noqa: F401
    folder = cute.dsl_on_path()
    assert folder == str(pkg / "dsl_packages")
    import cutlass

    assert cutlass.MARK == 7
    assert cute.dsl_on_path() == folder and sys.path.count(folder) == 1  # added once
    sys.modules.pop("cutlass", None)
