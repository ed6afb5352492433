"""The interpreter shim makes bf16 dots and fp32->bf16 casts behave as on the GPU."""

import pytest
import torch
import triton
import triton.language as tl

from aka.evaluate.host.interp import bf16_dot_shim_works, interpreter_requested

pytestmark = pytest.mark.skipif(not interpreter_requested(), reason="needs TRITON_INTERPRET=1")


@triton.jit
def _cast_kernel(x_ptr, y_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    tl.store(y_ptr + r, tl.load(x_ptr + r).to(tl.bfloat16))


def test_bf16_dot_matches_torch():
    ok, err = bf16_dot_shim_works()
    assert ok, err


def test_fp32_to_bf16_rounds_to_nearest_even():
    # 1 + 3 * 2^-9 lies between two bf16 values; truncation gives 1 + 2^-8, rounding gives 1 + 2^-7.
    x = torch.tensor([1 + 3 * 2**-9, -(1 + 3 * 2**-9), 1 + 2**-9, 3.14159265] * 4, dtype=torch.float32)
    y = torch.empty(16, dtype=torch.bfloat16)
    _cast_kernel[(1,)](x, y, N=16)
    assert torch.equal(y, x.to(torch.bfloat16))
