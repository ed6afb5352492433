"""Triton CPU interpreter support: one place that makes its bf16 numerics match the GPU's.

Triton's interpreter (``TRITON_INTERPRET=1``) stores bfloat16 blocks as uint16 numpy arrays, and
(seen with Triton 3.9):

- its ``create_dot`` multiplies those raw bit patterns as integers (a 16x16 bf16 dot came back
  with errors of 2.8e10), so bf16 dot operands are widened to float32 first;
- its fp32 -> bf16 cast truncates where the GPU rounds to nearest even, which doubles every bf16
  rounding error (a GDN kernel measured 1.2e-2 instead of 2.9e-3 against float64), so the cast is
  redone with torch's round-to-nearest-even.

The shim wraps the interpreter's builder once; :func:`bf16_dot_shim_works` proves it on a kernel.
"""

from __future__ import annotations

import os

_INSTALLED = False


def interpreter_requested() -> bool:
    """True when Triton kernels will run in the CPU interpreter in this process."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def enable_interpreter() -> None:
    """Select the interpreter. Must run before any module decorates a kernel with @triton.jit."""
    os.environ["TRITON_INTERPRET"] = "1"
    install_bf16_dot_shim()


def setup_interpreter(mode: str) -> bool:
    """Select the Triton interpreter per AKA_WORKER_INTERPRETER (1, 0, auto). True when selected."""
    if mode == "0":
        os.environ.pop("TRITON_INTERPRET", None)
        return False
    if mode == "auto" and os.environ.get("TRITON_INTERPRET") != "1":
        import torch

        if torch.cuda.is_available():
            return False
    enable_interpreter()  # before any candidate module decorates a kernel
    return True


def install_bf16_dot_shim() -> bool:
    """Patch the interpreter's dot to widen bf16 operands to fp32. Idempotent.

    Returns True when the patch is in place. Raises RuntimeError with the fix when this
    Triton's interpreter has no dot builder to patch (the internals moved).
    """
    global _INSTALLED
    if _INSTALLED:
        return True
    import numpy as np
    import triton.language as tl

    try:
        from triton.runtime import interpreter as _interp
    except ImportError as exc:  # pragma: no cover - depends on triton build
        raise RuntimeError(f"triton {_triton_version()} has no interpreter module: {exc}") from exc
    builder = getattr(_interp, "InterpreterBuilder", None)
    convert = getattr(_interp, "_convert_float", None)
    if builder is None or convert is None or not hasattr(builder, "create_dot"):
        raise RuntimeError(
            f"triton {_triton_version()}: interpreter internals changed (no InterpreterBuilder.create_dot);"
            " update aka/evaluate/host/interp.py for this version"
        )
    original = builder.create_dot

    def create_dot(self, a, b, d, *args, **kwargs):
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            a = _widen(a, convert, np, tl, _interp)
            b = _widen(b, convert, np, tl, _interp)
        return original(self, a, b, d, *args, **kwargs)

    builder.create_dot = create_dot
    _install_rtne_cast(builder, np, tl, _interp)
    _INSTALLED = True
    return True


def _install_rtne_cast(builder, np, tl, interp_mod) -> None:
    import torch

    original = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            x = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
            bits = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            return interp_mod.TensorHandle(bits, tl.bfloat16)
        return original(self, src, dst_type)

    builder.cast_impl = cast_impl
    # create_fp_trunc is bound to the old cast_impl at class creation: rebind it.
    builder.create_fp_trunc = lambda self, src, dst_type: self.cast_impl(src, dst_type)


def _widen(handle, convert, np, tl, interp_mod):
    if handle.dtype.scalar != tl.bfloat16:
        data = handle.data.astype(np.float32)
    else:
        data = convert(handle.data, tl.bfloat16, tl.float32, None).view(np.float32)
    return interp_mod.TensorHandle(data, tl.float32)


def bf16_dot_shim_works() -> tuple[bool, float]:
    """Run a 32x32 bf16 dot kernel in the interpreter; return (ok, max abs error vs torch)."""
    import torch
    import triton
    import triton.language as tl

    if not interpreter_requested():
        raise RuntimeError("bf16_dot_shim_works() needs TRITON_INTERPRET=1 set before triton kernels load")
    install_bf16_dot_shim()

    @triton.jit
    def _dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r[:, None] * N + r[None, :])
        b = tl.load(b_ptr + r[:, None] * N + r[None, :])
        tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(32, 32, generator=gen).to(torch.bfloat16)
    b = torch.randn(32, 32, generator=gen).to(torch.bfloat16)
    c = torch.empty(32, 32, dtype=torch.float32)
    _dot_kernel[(1,)](a, b, c, N=32)
    err = (c - a.float() @ b.float()).abs().max().item()
    return err < 1e-3, err


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except Exception:  # pragma: no cover
        return "?"
