"""Trips a device-side assertion (debug kernel): the CUDA context is lost. Op: fa4_decode. GPU only."""

import torch
import triton
import triton.language as tl


@triton.jit(debug=True)
def _check(kvl_ptr, o_ptr):
    kv = tl.load(kvl_ptr)
    tl.device_assert(kv < 0, "kv_len must be negative")
    tl.store(o_ptr, kv.to(tl.bfloat16))


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    o = torch.zeros_like(q)
    _check[(1,)](kv_lens, o)
    return o
