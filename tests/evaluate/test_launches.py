"""What a call ran (aka.evaluate.host.launches): the pure verdict, and the recorder on real calls in the interpreter."""

from __future__ import annotations

import torch

from aka.evaluate.host.launches import Recorder, is_compute, library_kernels, problem
from aka.evaluate.wire import Launches


def test_glue_on_floats_and_any_integer_work_are_allowed():
    for op in ("view", "empty_like", "copy_", "_to_copy", "zero_", "cat", "select", "clone"):
        assert not is_compute(op, floating=True)
    for op in ("cumsum", "max", "mul", "index", "sort"):
        assert not is_compute(op, floating=False)  # index bookkeeping on integers
    for op in ("mul", "sum", "mm", "bmm", "exp", "softmax", "index", "_scaled_dot_product_flash_attention", "pow"):
        assert is_compute(op, floating=True)


def test_problem_names_what_ran():
    assert problem(Launches(triton={"_k": 2}, torch_ops={"empty": 3})) == ""
    why = problem(Launches(torch_ops={"mul": 2, "sum": 1}, torch_compute={"mul": 2, "sum": 1}))
    assert why.startswith("computed with torch outside its kernels: mul x2, sum x1")
    rec = Launches(triton={"_attn_fwd": 1}, device_kernels={
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": 1, "_attn_fwd": 1,
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>": 2})
    assert list(library_kernels(rec)) == ["sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"]
    assert problem(rec).startswith("launched library kernels: sm90_xmma_gemm")
    # a candidate's own CUDA kernel (--lang cuda) may be called anything
    assert library_kernels(Launches(device_kernels={"flash_decode_kernel": 1}), own={"flash_decode_kernel"}) == {}


def test_recorder_sees_torch_operators_but_not_triton_launches():
    from aka.evaluate.host.interp import enable_interpreter

    enable_interpreter()
    import triton
    import triton.language as tl

    @triton.jit
    def _double(x_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        tl.store(x_ptr + r, tl.load(x_ptr + r) * 2)

    x = torch.ones(16)
    with Recorder() as rec:
        y = torch.empty_like(x)
        y.copy_(x)
        _double[(1,)](y, N=16)
        z = (y * 3).sum()
    assert rec.launches.triton == {"_double": 1}
    assert rec.launches.torch_compute == {"mul": 1, "sum": 1}
    assert {"empty_like", "copy_"} <= set(rec.launches.torch_ops)
    assert float(z) == 96.0


def test_recorder_counts_launches_straight_through_a_compiled_kernel():
    """A kernel's own launch cache calls compiled[grid](*args), which JITFunction.run never sees: the
    hook on the compiled kernel's class counts it under the kernel's name, only inside a Recorder."""
    from aka.evaluate.host.launches import _wrap_compiled

    ran = []

    class Compiled:  # the shape of triton.compiler.compiler.CompiledKernel's launch entry
        name = "_attn_fwd"

        def __getitem__(self, grid):
            return lambda *args, **kw: ran.append((grid, args))

    _wrap_compiled(Compiled)
    k = Compiled()
    k[(2, 1, 1)](1, 2)  # outside a Recorder: runs, counts nowhere
    with Recorder() as rec:
        k[(4, 1, 1)]("a")
        k[(4, 1, 1)]("b")
    assert ran == [((2, 1, 1), (1, 2)), ((4, 1, 1), ("a",)), ((4, 1, 1), ("b",))]
    assert rec.launches.triton == {"_attn_fwd": 2}


def test_install_hooks_wraps_the_compiled_kernel_class():
    from triton.compiler.compiler import CompiledKernel

    from aka.evaluate.host.launches import install_hooks

    install_hooks()
    assert CompiledKernel.__getitem__.__qualname__.startswith("_wrap_compiled")
