"""What both kernels' launchers share: log2(e) for the base-2 softmax, the plan numbering, and the launch
path (_Launch, keyed by _arg_key) that skips Triton's per-call binding once a kernel is compiled."""

from __future__ import annotations

import torch

from aka.launch import Launcher

_LOG2E = 1.4426950408889634

# Plans (per shape and CONFIG: grid, constexprs, scale) are kept per kernel (triton_fwd.py's _PLANS,
# gluon_fwd.py's _GLUON_PLANS), each cleared when it holds _PLANS_MAX. A plan's number comes from the
# one counter below and is never reused, so a launch cache keyed on it never meets another plan's code.
_PLANS_MAX = 256
_PLAN_COUNT = [0]  # plans built so far: a plan's number, never reused (the launch cache keys on it)


def _arg_key(a, _tensor=torch.Tensor):
    """What Triton specialises a compiled kernel on, per argument, or more: a tensor's dtype and
    16-byte alignment, an int's exact value (Triton keys on == 1, % 16 and the int width), a float's
    or bool's type and value, a descriptor's dtype, alignment, shape, strides and box. The device is
    in the plan key. Same key -> the same compiled code applies. Cheap on purpose (~0.3 us a tensor):
    it runs for every argument of every launch."""
    t = type(a)
    if t is int:
        return a
    if isinstance(a, _tensor):
        return (a.dtype, a.data_ptr() & 15)
    if t is float or t is bool:
        return (t, a)
    base = a.base  # a host TensorDescriptor (Triton's or Gluon's)
    return (base.dtype, base.data_ptr() & 15, *a.shape, *a.strides, *a.block_shape)


class _Launch:
    """Launches one kernel through aka.launch's Launcher (the first call of a key through Triton's JIT,
    later ones through Triton's C launcher with what the runner recomputes per launch kept), keyed by the
    plan (constexprs, warps, stages) and every argument's _arg_key, so a call Triton would compile
    differently never reuses the wrong code. The interpreter compiles nothing: there every call takes
    the JIT path."""

    def __init__(self, fn):
        self.fn = fn
        self.kept = Launcher(fn)
        self.hits = self.kept.hits  # key -> the compiled kernel's kept launch

    def __call__(self, grid, plan_key, args, kw):
        self.kept(grid, args, kw, (plan_key, tuple(map(_arg_key, args))))
