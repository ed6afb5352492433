"""Paged causal FlashAttention prefill (head dim 256): the entry point, its CONFIG and which of two kernels
runs a call.

Interface (workloads/fa4_prefill.yaml):
    q            [T_q_total, Hq, 256]            bf16, packed varlen (cu_seqlens_q)
    k_cache      [num_pages, 64, Hkv, 256]       bf16, NHD pages of PAGE tokens
    v_cache      [num_pages, 64, Hkv, 256]       bf16
    page_table   [N, max_pages]                  int32 page ids (any order)
    cu_seqlens_q [N+1]                           int32
    kv_lens      [N]                             int32, cached prefix + new tokens
    -> o         [T_q_total, Hq, 256]            bf16

Causal, bottom-right aligned: new token i of sequence n sits at absolute position
kv_len - q_len + i and sees keys 0..that position. q head h reads kv head h // (Hq // Hkv).

The kernels, one file each beside this one:
  common.py      what both launchers share: the launch cache (_Launch, _arg_key), the plan numbers, log2(e).
  triton_fwd.py  the Triton kernel (FlashAttention-2's forward, head-group packing, TMA boxes of the
                 paged cache): runs wherever Triton runs, its CPU interpreter included.
  gluon_fwd.py   the Gluon kernel for Hopper (sm_90a), FlashAttention-3's design (a TMA loader warp, two
                 consumer warpgroups with setmaxnreg, the softmax overlapped with the previous PV):
                 needs a real sm_90 GPU; Triton's interpreter cannot run Gluon.

Which kernel runs a call, CONFIG["kernel"]:
  "auto"    (default) Gluon when the tensors are on an NVIDIA sm_90 GPU (capability (9, 0)), the module
            is not run by Triton's interpreter, and the inputs are what the Gluon kernel takes (bf16 q and
            caches with head dim 256 and pages of 64, int32 page table, cu_seqlens_q and kv_lens, q and the
            caches contiguous and 16-byte aligned: TMA views them as 2-D); the Triton kernel everywhere
            else: the CPU interpreter (tests, `aka optimize` on CPU), other GPUs, other inputs.
  "triton"  always the Triton kernel.
  "gluon"   always the Gluon kernel; a call it cannot take is a ValueError saying why, before any launch.
Any other value is a ValueError before any launch. What decides depends on the device (its capability is
asked once a device), the shapes and dtypes (decided once a key, _ROUTES) and, per call, contiguity and
alignment: a few dict lookups and attribute reads on the host.

Why Gluon on sm_90: on an H100 (80GB HBM3, Triton 3.6.0, torch 2.11.0+cu130, 2026-12-05,
docs/perf/fa4_prefill.md) the Gluon kernel passed the gate on the smoke, edge and full sets and ran
1.09-1.72x the Triton kernel with this CONFIG (then the promoted kernel) on all 30 full shapes under
CUDA-graph replay, geomean 1.34x. The Triton kernel's CONFIG values are the ones `aka optimize` promoted on
the H200 (run 20261203-065104-64d7bb, attempt 6: head-group packing on, Triton's automatic warp
specialisation off; ABBA +2.8% over the earlier defaults, gated on the smoke, edge and full sets), so
the fallback is the best Triton kernel measured.

One file per stage is the source; what the gate, the benchmark and the loop see is one module, rendered
from the stages in the order the contract lists them (workloads/fa4_prefill.yaml, modules.stages) into
kernels/fa4_prefill/baseline.py (ignored by git; aka renders it again whenever a stage changes). Edit the
stages; a promoted candidate keeps its own full module (or only its CONFIG values, promoted.json).
"""

from __future__ import annotations

import torch

from .gluon_fwd import _gluon_forward
from .triton_fwd import _INTERPRETED, _triton_forward

# Values used at call time (the entry reads the module global each call, so a search can swap it).
CONFIG = {
    # which kernel runs a call: "auto", "triton" or "gluon" (module docstring)
    "kernel": "auto",
    # the Triton kernel (triton_fwd.py): the values aka optimize promoted on the H200 (module docstring)
    "BLOCK_M": 128,
    "BLOCK_N": 64,
    "num_warps": 8,
    "num_stages": 2,
    "PACK_GQA": True,  # the G heads of a KV head in one tile, K/V read once a group (promoted 2026-12-03)
    "SPLIT_CAUSAL": True,
    "USE_TMA": True,  # H200 run 2: P5 426 -> TMA, vs 403 TF/s pointer gather; P7 529 vs 480
    "WARP_SPEC": False,  # Triton's automatic warp specialisation: within noise, off in the promoted point
    # the Gluon kernel (gluon_fwd.py). K and V ring slots (32 KB each per ring): 3 exceeds shared memory
    # beside Q's 64 KB, 1 serialises loads and MMAs (it compiles and is deadlock-free, but is no real
    # choice), so SPACE holds 2 only.
    "gluon_stages": 2,
    # setmaxnreg of consumer warpgroup 1 and of the TMA warp's warpgroup; Triton 3.6 sets the default
    # partition (consumer 0) to 240 as well: 128 * (240 + 240 + 24) = 64512 of the 65536 registers.
    "gluon_regs": 240,
    "gluon_regs_load": 24,
    # The Gluon kernel's launch order (gluon_fwd.py's docstring): "head_fast" grid (Hq, tiles) or "tile_fast"
    # (tiles, Hq); "heavy_first" (the causal tiles with the most keys start first) or "in_order". The shipped
    # pair is the Triton kernel's order; the others are untimed.
    "gluon_grid": "head_fast",
    "gluon_tile_order": "heavy_first",
}

# Name -> values that compile and pass: the Triton kernel's interpreter-checked (tests/kernels/
# test_fa4_prefill_baseline.py); the Gluon kernel's fixed by shared memory and the register file (CONFIG).
# "kernel": the patterns (patterns/*.yaml) pin it, none searches it.
SPACE = {
    "kernel": ["auto", "triton", "gluon"],
    "BLOCK_M": [64, 128],
    "BLOCK_N": [32, 64],
    "num_warps": [4, 8],
    "num_stages": [1, 2, 3],
    "PACK_GQA": [False, True],
    "SPLIT_CAUSAL": [False, True],
    "USE_TMA": [False, True],
    "WARP_SPEC": [False, True],
    "gluon_stages": [2],
    "gluon_regs": [240],
    "gluon_regs_load": [24],
    "gluon_grid": ["head_fast", "tile_fast"],
    "gluon_tile_order": ["heavy_first", "in_order"],
}


def fa4_prefill(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale=None):
    """Paged causal prefill. Shapes in the module docstring; returns o like q. Runs the kernel
    CONFIG["kernel"] picks (module docstring); no host sync either way."""
    cfg = CONFIG
    kernel = cfg.get("kernel", "auto")
    if kernel == "auto":
        unfit = _gluon_unfit(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens)
        forward = _triton_forward if unfit else _gluon_forward
    elif kernel == "triton":
        forward = _triton_forward
    elif kernel == "gluon":
        unfit = _gluon_unfit(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens)
        if unfit:
            raise ValueError(f"fa4_prefill: CONFIG['kernel'] is 'gluon' but the Gluon kernel cannot run this call: "
                             f"{unfit}; use 'auto' (Gluon where it can, else Triton) or 'triton'")
        forward = _gluon_forward
    else:
        raise ValueError(f"fa4_prefill: CONFIG['kernel'] is 'auto', 'triton' or 'gluon', not {kernel!r}")
    return forward(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale, cfg)


# What the Gluon kernel needs of a call, checked cheaply every call:
# - _SM90: device index -> '' when it is an NVIDIA sm_90 GPU, else why not. Asked once a device (a
#   capability query costs microseconds). The name guards against ROCm, whose gfx90a also reports (9, 0).
# - _ROUTES: (device index, shapes, dtypes) -> '' when the Gluon kernel takes such a call, else why not.
_SM90 = {}
_ROUTES = {}


def _sm90_unfit(index):
    major, minor = torch.cuda.get_device_capability(index)
    name = torch.cuda.get_device_name(index)
    if (major, minor) != (9, 0) or "NVIDIA" not in name:
        return f"{name} (capability {major}.{minor}) is not an NVIDIA sm_90 GPU"
    return ""


def _shapes_unfit(q_shape, k_shape, v_shape, dtypes):
    if len(q_shape) != 3 or len(k_shape) != 4 or v_shape != k_shape:
        return "q must be [T, Hq, D] and both caches [pages, page, Hkv, D] alike"
    d, page, hkv, dk = q_shape[2], k_shape[1], k_shape[2], k_shape[3]
    if d != 256 or dk != 256:
        return f"head dim {d}/{dk}, the kernel's is 256"
    if page != 64:
        return f"pages of {page} tokens, the kernel's are 64"
    if hkv == 0 or q_shape[1] % hkv:
        return f"{q_shape[1]} query heads do not group over {hkv} KV heads"
    if dtypes[:3] != (torch.bfloat16, torch.bfloat16, torch.bfloat16):
        return f"q, k_cache, v_cache are {dtypes[0]}, {dtypes[1]}, {dtypes[2]}, not bfloat16"
    if dtypes[3:] != (torch.int32, torch.int32, torch.int32):
        return f"page_table, cu_seqlens_q, kv_lens are {dtypes[3]}, {dtypes[4]}, {dtypes[5]}, not int32"
    return ""


def _gluon_unfit(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens):
    """'' when the Gluon kernel can run this call, else why not (one clause)."""
    if not q.is_cuda:
        return "the tensors are not on a CUDA GPU"
    if _INTERPRETED:
        return "Triton's interpreter runs this module (TRITON_INTERPRET=1) and cannot run Gluon"
    index = q.get_device()
    why = _SM90.get(index)
    if why is None:
        why = _SM90[index] = _sm90_unfit(index)
    if why:
        return why
    key = (index, q.shape, k_cache.shape, v_cache.shape, q.dtype, k_cache.dtype, v_cache.dtype,
           page_table.dtype, cu_seqlens_q.dtype, kv_lens.dtype)
    why = _ROUTES.get(key)
    if why is None:
        if len(_ROUTES) >= 256:
            _ROUTES.clear()
        why = _ROUTES[key] = _shapes_unfit(key[1], key[2], key[3], key[4:])
    if why:
        return why
    if not (q.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous()):
        return "q, k_cache and v_cache must be contiguous (TMA views them as 2-D)"
    if (q.data_ptr() | k_cache.data_ptr() | v_cache.data_ptr()) & 15:
        return "q, k_cache and v_cache must start at 16-byte aligned addresses (TMA)"
    return ""
