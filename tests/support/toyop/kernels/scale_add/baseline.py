"""scale_add baseline: one Triton program per BLOCK elements."""

import torch
import triton
import triton.language as tl

CONFIG = {"BLOCK": 128}


@triton.jit
def _kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(o_ptr + offs, 2 * x + y, mask=mask)


def scale_add(x, y):
    o = torch.empty_like(x)
    n = x.numel()
    _kernel[(triton.cdiv(n, CONFIG["BLOCK"]),)](x, y, o, n, BLOCK=CONFIG["BLOCK"])
    return o
