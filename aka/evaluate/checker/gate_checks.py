"""Pure checks of one candidate output against its float64 reference (unit-tested on their own).

Error figures, both computed in float64:
  rel_l2      = ||out - ref|| / ||ref||
  max_abs_rel = max |out - ref| / max |ref|   (no element beyond a bound set by the output's scale)
The plain same-precision implementation gets the same figures; a candidate whose rel L2 exceeds
plain_ratio x max(plain rel L2, plain_floor) dropped precision even when inside the tolerance.
Checks run from the cheapest and most specific reason to the most general, and the first failure
is the reason reported.
"""

from __future__ import annotations

from typing import Any

from aka.evaluate.wire import OutputCheck


def error_metrics(out, ref) -> tuple[float, float]:
    """(rel L2, max abs error / max |ref|) of out against ref, in float64. A zero ref divides by 1."""
    d = out.double() - ref.double()
    ref_norm = ref.double().norm().item()
    ref_max = ref.double().abs().max().item() if ref.numel() else 0.0
    rel = d.norm().item() / (ref_norm or 1.0)
    mx = (d.abs().max().item() if d.numel() else 0.0) / (ref_max or 1.0)
    return rel, mx


def nonfinite_fraction(t) -> float:
    import torch

    if not t.is_floating_point() or t.numel() == 0:
        return 0.0
    return (~torch.isfinite(t)).float().mean().item()


def nan_equal(a, b) -> bool:
    """Elementwise equality where NaN equals NaN (poisoned, never written, is still 'unchanged')."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def _shares_storage(out, inputs: dict[str, Any]) -> str:
    try:
        ptr = out.untyped_storage().data_ptr()
    except RuntimeError:
        return ""
    for k, v in inputs.items():
        if v.numel() and v.untyped_storage().data_ptr() == ptr:
            return k
    return ""


def check_output(name: str, out, ref, plain, tol, dtype, device: str, inputs: dict[str, Any],
                 prev=None) -> OutputCheck:
    """Check one output; `prev` is this output from the previous call on the same shape (other inputs)."""
    import torch

    def fail(reason: str, **figs) -> OutputCheck:
        return OutputCheck(name=name, ok=False, reason=f"{name}: {reason}", **figs)

    if not isinstance(out, torch.Tensor):
        return fail(f"returned {type(out).__name__}, expected a tensor")
    if type(out) is not torch.Tensor:  # a subclass could answer the checks' own torch calls
        return fail(f"returned a {type(out).__name__}, a torch.Tensor subclass; return a plain tensor")
    if tuple(out.shape) != tuple(ref.shape):
        return fail(f"shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if out.dtype != dtype:
        return fail(f"dtype {str(out.dtype).replace('torch.', '')} != {str(dtype).replace('torch.', '')}")
    if out.device.type != torch.device(device).type:
        return fail(f"on device {out.device.type}, expected {device}")
    source = _shares_storage(out, inputs)
    if source:
        return fail(f"returns input '{source}' (shares its storage)")
    bad = nonfinite_fraction(out)
    if bad:
        return fail(f"NaN/Inf in {_pct(bad)} of elements")
    if prev is not None and nan_equal(out, prev):
        return fail("cached result (identical output for different inputs)")
    rel, mx = error_metrics(out, ref)
    p_rel, p_mx = error_metrics(plain, ref)
    figs = dict(rel_l2=rel, max_abs_rel=mx, plain_rel_l2=p_rel, plain_max_abs_rel=p_mx)
    if out.numel() and not bool(out.any()) and bool(ref.any()):
        return fail("all zeros", **figs)
    if rel > tol.rel_l2:
        return fail(f"rel L2 {rel:.2e} > {tol.rel_l2:.1e}", **figs)
    if mx > tol.max_abs_rel:
        return fail(f"max element error {mx:.2e} > {tol.max_abs_rel:.1e} (of max |ref|)", **figs)
    bound = tol.plain_ratio * max(p_rel, tol.plain_floor)
    if rel > bound:
        return fail(f"precision drop: error {rel:.2e} > {tol.plain_ratio:g} x plain {max(p_rel, tol.plain_floor):.2e}",
                    **figs)
    return OutputCheck(name=name, ok=True, **figs)


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.01 else f"{x:.2%}"


def within_tolerance(name: str, out, ref, tol) -> str:
    """'' when ``out`` is finite and inside the contract's tolerance of the float64 ``ref``; else why.
    What the timing's output check asks of a timed call (aka.evaluate.checker.verify); the gate asks more."""
    if tuple(out.shape) != tuple(ref.shape):
        return f"{name}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"
    bad = nonfinite_fraction(out)
    if bad:
        return f"{name}: NaN/Inf in {_pct(bad)} of elements"
    if out.numel() and not bool(out.any()) and bool(ref.any()):
        return f"{name}: all zeros"
    rel, mx = error_metrics(out, ref)
    if rel > tol.rel_l2:
        return f"{name}: rel L2 {rel:.2e} > {tol.rel_l2:.1e}"
    if mx > tol.max_abs_rel:
        return f"{name}: max element error {mx:.2e} > {tol.max_abs_rel:.1e} (of max |ref|)"
    return ""
