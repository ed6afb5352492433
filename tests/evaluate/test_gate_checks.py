"""The gate's pure checks, on hand-made tensors: every reason can fire, and a correct output passes."""

from __future__ import annotations

import torch

from aka.contract.spec import Tolerance
from aka.evaluate.checker.gate_checks import check_output, error_metrics, nan_equal, nonfinite_fraction

TOL = Tolerance(rel_l2=1e-2, max_abs_rel=5e-2, plain_ratio=3.0, plain_floor=1e-4)


def _case(seed=0, n=4096):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, generator=g, dtype=torch.float64)
    plain = (ref + 1e-3 * torch.randn(n, generator=g, dtype=torch.float64)).to(torch.bfloat16)
    return ref, plain


def check(out, ref, plain, tol=TOL, inputs=None, prev=None):
    return check_output("o", out, ref, plain, tol, torch.bfloat16, "cpu", inputs or {}, prev)


def test_metrics():
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    rel, mx = error_metrics(torch.tensor([3.0, 5.0]), ref)
    assert abs(rel - 1 / 5) < 1e-12 and abs(mx - 1 / 4) < 1e-12
    assert error_metrics(torch.zeros(2), torch.zeros(2, dtype=torch.float64)) == (0.0, 0.0)


def test_correct_output_passes_with_figures():
    ref, plain = _case()
    c = check(ref.to(torch.bfloat16), ref, plain)
    assert c.ok and c.reason == "" and 0 < c.rel_l2 < 5e-3 and c.plain_rel_l2 > 0


def test_reasons():
    ref, plain = _case()
    good = ref.to(torch.bfloat16)
    nan = good.clone()
    nan[:1024] = float("nan")
    assert check(nan, ref, plain).reason == "o: NaN/Inf in 25% of elements"
    assert check(torch.zeros_like(good), ref, plain).reason == "o: all zeros"
    assert check(good.float(), ref, plain).reason == "o: dtype float32 != bfloat16"
    assert check(good[:-1], ref, plain).reason == "o: shape (4095,) != expected (4096,)"
    assert check((2 * ref).to(torch.bfloat16), ref, plain).reason.startswith("o: rel L2 1.00e+00 > 1.0e-02")
    spike = good.clone()
    spike[7] += 0.5  # one element far off, the rest exact: rel L2 small, max element large
    assert "max element error" in check(spike, ref, plain).reason
    assert check(good, ref, plain, inputs={"q": good}).reason == "o: returns input 'q' (shares its storage)"
    assert check(good, ref, plain, prev=good.clone()).reason == \
        "o: cached result (identical output for different inputs)"
    assert check("nope", ref, plain).reason == "o: returned str, expected a tensor"

    class Liar(torch.Tensor):
        pass

    assert "torch.Tensor subclass" in check(good.as_subclass(Liar), ref, plain).reason


def test_precision_drop_inside_the_tolerance():
    ref, plain = _case()
    g = torch.Generator().manual_seed(1)
    worse = (ref + 6e-3 * torch.randn(ref.shape, generator=g, dtype=torch.float64)).to(torch.bfloat16)
    c = check(worse, ref, plain)
    assert c.rel_l2 < TOL.rel_l2  # inside the loose tolerance ...
    assert c.reason.startswith("o: precision drop: error")  # ... but more than 3x the plain error
    loose = TOL.model_copy(update={"plain_ratio": 100.0})
    assert check(worse, ref, plain, tol=loose).ok


def test_plain_floor_protects_exact_plain():
    ref = torch.randn(256, dtype=torch.float64).to(torch.bfloat16).double()  # representable: plain error 0
    out = (ref + 1e-5 * torch.randn(256, dtype=torch.float64)).to(torch.bfloat16)
    assert check(out, ref, ref.to(torch.bfloat16)).ok


def test_nan_helpers():
    a = torch.tensor([1.0, float("nan")])
    assert nan_equal(a, a.clone()) and not nan_equal(a, torch.tensor([1.0, 2.0]))
    assert nonfinite_fraction(torch.tensor([1.0, float("inf")])) == 0.5
    assert nonfinite_fraction(torch.tensor([1, 2])) == 0.0
