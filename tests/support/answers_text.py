"""Model answers the fake servers play: plans and modules for the toy op scale_add."""

from __future__ import annotations

import json
from pathlib import Path

BASELINE = (Path(__file__).parent / "toyop" / "kernels" / "scale_add" / "baseline.py").read_text()

PLAN = {"hypothesis": "larger blocks halve the program count (S2: 8 -> 4 programs)",
        "structural_change": "", "expected_effect": {"batch 1, short": "-5%"},
        "risks": ["none for an elementwise op"], "param_ranges": {"BLOCK": [128, 256, 512]},
        "avoided": ["vectorised loads: no gain in the interpreter"], "cited_wiki": [], "cited_evidence": []}
GOOD_PLAN = "Here is my plan.\n```json\n" + json.dumps(PLAN, indent=1) + "\n```\n"
BAD_PLAN = '```json\n{"hypothesis": "bigger", "risk": "typo in the field name"}\n```'  # 'risk' is not a field
NOT_JSON = "I think we should use larger blocks."

GOOD_CODE = BASELINE.replace('CONFIG = {"BLOCK": 128}', 'CONFIG = {"BLOCK": 256}')
# Passes the static check, fails when the kernel is compiled (traced) on its first call.
COMPILE_ERROR_CODE = GOOD_CODE.replace("tl.store(o_ptr + offs, 2 * x + y, mask=mask)",
                                       "tl.store(o_ptr + offs, tl.fused_twice_plus(x, y), mask=mask)")
OTHER_OP_CODE = "import torch\n\n\ndef fa4_decode(q, k_cache, v_cache):\n    return q\n"


def fenced(code: str) -> str:
    return f"Here is the module.\n```python\n{code}```\n"


PROSE = "Larger blocks would help; I would change BLOCK to 256 and keep the rest."

# A CUDA candidate: raw-pointer launcher so CUDA_SRC needs only <cuda_runtime.h> (nvcc: ~1 s here;
# <torch/extension.h> would take minutes on a 2-core machine).
CUDA_CODE = '''import torch
from torch.utils.cpp_extension import load_inline

CONFIG = {"threads": 256}

CUDA_SRC = r"""
#include <cstdint>
#include <cuda_runtime.h>
__global__ void scale_add_kernel(const float* x, const float* y, float* o, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) o[i] = 2.f * x[i] + y[i];
}
void scale_add_launch(int64_t x, int64_t y, int64_t o, int64_t n, int64_t threads) {
    scale_add_kernel<<<(n + threads - 1) / threads, threads>>>((const float*)x, (const float*)y, (float*)o, n);
}
"""
CPP_SRC = "void scale_add_launch(int64_t x, int64_t y, int64_t o, int64_t n, int64_t threads);"

_ext = load_inline(name="scale_add_ext", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                   functions=["scale_add_launch"], extra_cuda_cflags=["-O3", "-arch=sm_90a"])


def scale_add(x, y):
    o = torch.empty_like(x)
    _ext.scale_add_launch(x.data_ptr(), y.data_ptr(), o.data_ptr(), x.numel(), CONFIG["threads"])
    return o
'''
CUDA_BROKEN = CUDA_CODE.replace("o[i] = 2.f * x[i] + y[i];", "o[i] = 2.f * x[i] + y[i]")  # missing ';'
