"""What a candidate's call actually ran: Triton launches, torch operators outside them, device kernels.

The static policy reads what is written; this reads what runs. Inside the candidate's process,
:class:`Recorder` wraps one call and notes
- every Triton launch (``JITFunction.run`` on a GPU, ``InterpretedFunction.run`` in the interpreter,
  a compiled kernel's runner, aka.launch's kept path; the autotuner's benchmarking counts as Triton's
  own work),
- every torch operator dispatched outside those launches (a ``TorchDispatchMode``), with whether a
  floating-point tensor took part,
- on a GPU, the device kernels the torch profiler saw.
:func:`problem` (pure) then says whether the call computed outside its kernels: torch may allocate,
view, copy, cast, fill and do integer index bookkeeping around them, nothing else; a device kernel
from cuBLAS, cuDNN or an attention library is refused whatever launched it.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import Any

from aka.evaluate.wire import Launches

# torch operators that move or describe data without computing on it: views, allocation, copies,
# casts, fills (by overload packet name, as the dispatcher reports them)
GLUE_OPS = frozenset({
    # views and metadata
    "view", "_unsafe_view", "reshape", "as_strided", "expand", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "select", "slice", "narrow", "alias", "detach", "unbind", "split", "split_with_sizes", "chunk",
    "flatten", "unflatten", "view_as", "expand_as", "movedim", "lift_fresh", "_reshape_alias", "unfold",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size", "resize_", "set_",
    # allocation
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "ones",
    "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "scalar_tensor", "empty_permuted",
    # copies, casts, fills
    "clone", "copy_", "_to_copy", "to", "contiguous", "lift_fresh_copy", "_copy_from", "_copy_from_and_resize",
    "cat", "stack", "fill_", "zero_", "record_stream",
})
# device kernels of the libraries a candidate must not hand its work to
_LIBRARY_KERNEL = re.compile(r"gemm|gemv|cublas|cutlass|xmma|cudnn|flash|fmha|attention|attn|softmax|sdpa|"
                             r"_scaled_dot|sm90_|sm80_|ampere_|hopper_|volta_|turing_|bmm|matmul|conv", re.I)


def is_compute(op: str, floating: bool) -> bool:
    """A torch operator outside the kernels that does the op's work: any non-glue one on float data."""
    return floating and op not in GLUE_OPS


def library_kernels(rec: Launches, own: set[str] = frozenset()) -> dict[str, int]:
    """Device kernels from a vendor/attention library: not Triton's, not the candidate's own CUDA."""
    mine = set(rec.triton) | set(own)
    return {k: n for k, n in rec.device_kernels.items()
            if _LIBRARY_KERNEL.search(k) and not any(k == m or k.startswith(m + "_") for m in mine)}


def _counts(d: dict[str, int], limit: int = 6) -> str:
    items = sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} x{n}" for k, n in items[:limit])
    return text + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


def problem(rec: Launches, own: set[str] = frozenset()) -> str:
    """'' when the call did its work in its own kernels; else one line naming what ran instead."""
    if rec.torch_compute:
        return (f"computed with torch outside its kernels: {_counts(rec.torch_compute)} (outside Triton, torch "
                "may only allocate, view, copy, cast, fill and do integer index bookkeeping)")
    lib = library_kernels(rec, own)
    if lib:
        return f"launched library kernels: {_counts({k[:80]: n for k, n in lib.items()})}"
    return ""


# ---------------------------------------------------------------------------------------------
# recording (candidate's process)

_STATE = threading.local()
_HOOKED = False


def _depth() -> int:
    return getattr(_STATE, "depth", 0)


def _wrap(cls, count: bool) -> None:
    original = cls.run

    def run(self, *args, **kwargs):
        _STATE.depth = _depth() + 1
        try:
            rec = getattr(_STATE, "rec", None)
            if count and rec is not None and not kwargs.get("warmup", False):
                name = getattr(getattr(self, "fn", None), "__name__", type(self).__name__)
                rec.triton[name] = rec.triton.get(name, 0) + 1
            return original(self, *args, **kwargs)
        finally:
            _STATE.depth -= 1

    cls.run = run


def _wrap_compiled(cls) -> None:
    """Count launches made straight through a compiled kernel (``compiled[grid](*args)``, what a
    kernel's own launch cache does to skip Triton's per-call binding): JITFunction.run never sees them.
    Triton's own JIT path calls ``compiled.run`` directly, so nothing is counted twice."""
    original = cls.__getitem__

    def getitem(self, grid):
        runner = original(self, grid)

        def counted(*args, **kwargs):
            rec = getattr(_STATE, "rec", None)
            if rec is not None:
                name = getattr(self, "name", type(self).__name__)
                rec.triton[name] = rec.triton.get(name, 0) + 1
            _STATE.depth = _depth() + 1
            try:
                return runner(*args, **kwargs)
            finally:
                _STATE.depth -= 1

        return counted

    cls.__getitem__ = getitem


def _kept(name: str) -> None:
    """A launch through aka.launch's kept path, which calls Triton's C launcher past the wrappers above."""
    rec = getattr(_STATE, "rec", None)
    if rec is not None:
        rec.triton[name] = rec.triton.get(name, 0) + 1


def install_hooks() -> None:
    """Wrap Triton's launch entry points once per process (before the candidate loads is not needed:
    the wrappers sit on the classes), and observe aka.launch's kept launches."""
    global _HOOKED
    if _HOOKED:
        return
    from triton.runtime import autotuner, jit

    from aka.launch import observe

    observe(_kept)
    _wrap(jit.JITFunction, count=True)
    try:
        from triton.compiler.compiler import CompiledKernel

        _wrap_compiled(CompiledKernel)
    except ImportError:  # pragma: no cover - a Triton without it
        pass
    _wrap(autotuner.Autotuner, count=False)  # its benchmarking runs torch ops: Triton's, not the candidate's
    _wrap(autotuner.Heuristics, count=False)
    try:
        from triton.runtime import interpreter

        _wrap(interpreter.InterpretedFunction, count=True)
    except ImportError:  # pragma: no cover - a Triton without the interpreter
        pass
    _HOOKED = True


_MODE_CLASS: list = []


def _mode_class():
    """The dispatch mode, built once. It says it never meets torch.compile: otherwise defining the class
    makes torch wrap its handler with torch._dynamo, whose import costs ~1.8 s on 2 CPU cores."""
    if _MODE_CLASS:
        return _MODE_CLASS[0]
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class _Mode(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        def __init__(self, ops: Counter, compute: Counter):
            super().__init__()
            self.ops, self.compute = ops, compute

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not _depth():
                name = func.overloadpacket.__name__
                floating = any(isinstance(t, torch.Tensor) and t.is_floating_point()
                               for t in tree_leaves((args, kwargs)))
                self.ops[name] += 1
                if is_compute(name, floating):
                    self.compute[name] += 1
            return func(*args, **(kwargs or {}))

    _MODE_CLASS.append(_Mode)
    return _Mode


class Recorder:
    """Context manager around one candidate call; ``.launches`` holds the record afterwards."""

    def __init__(self, profile_device: bool = False):
        self.launches = Launches()
        self.profile_device = profile_device
        self._mode = None
        self._prof = None

    def __enter__(self) -> Recorder:
        install_hooks()
        self._ops, self._compute = Counter(), Counter()
        _STATE.rec = self.launches
        if self.profile_device:
            self._start_profiler()
        self._mode = _mode_class()(self._ops, self._compute)
        self._mode.__enter__()
        return self

    def _start_profiler(self) -> None:
        try:
            from torch.profiler import ProfilerActivity, profile

            self._prof = profile(activities=[ProfilerActivity.CUDA])
            self._prof.__enter__()
        except Exception as exc:  # CUPTI missing or busy: say so, never fail the candidate for it
            self._prof = None
            self.launches.profiler = f"profiler unavailable: {type(exc).__name__}: {str(exc)[:120]}"

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        _STATE.rec = None
        rec = self.launches
        rec.torch_ops = dict(self._ops)
        rec.torch_compute = dict(self._compute)
        if self._prof is not None:
            try:
                self._prof.__exit__(None, None, None)
                kernels: Counter = Counter()
                for evt in self._prof.events():
                    if str(getattr(evt, "device_type", "")).endswith("CUDA"):
                        kernels[evt.name] += 1
                rec.device_kernels = dict(kernels)
            except Exception as e:  # pragma: no cover - depends on CUPTI
                rec.profiler = f"profiler failed: {type(e).__name__}: {str(e)[:120]}"
