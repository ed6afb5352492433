"""Paged FlashAttention decode (head dim 256, q_len 1 or 4): the entry point, its CONFIG and which of two split
kernels runs a call.

Interface (workloads/fa4_decode.yaml):
    q          [B * q_len, Hq, 256]          bf16, q_len in {1, 4} (= q rows // B)
    k_cache    [num_pages, 128, Hkv, 256]    bf16, NHD pages
    v_cache    [num_pages, 128, Hkv, 256]    bf16
    page_table [B, max_pages]                int32 page ids (slots past a sequence's pages: anything)
    kv_lens    [B]                           int32, includes the q_len new tokens
    -> o       [B * q_len, Hq, 256]          bf16

Draft j of q_len sees keys 0..kv_len - q_len + j (bottom-right causal among the drafts).

The kernels, one file each beside this one:
  common.py        what both launchers share: the shape-only split count, the SM count, the launch cache
                   (_Launch, _arg_key), the plan numbers, log2(e).
  triton_split.py  the Triton split and merge kernels (flash-decoding, split-KV with fp32 partials, TMA boxes
                   of the paged cache): run wherever Triton runs, its CPU interpreter included.
  gluon_split.py   the Gluon split kernel for Hopper (sm_90a): persistent, a TMA loader warp and a consumer
                   warpgroup, chunks balanced over the SMs from the real kv_lens; its partials go to the Triton
                   merge kernel. Needs a real sm_90 GPU; Triton's interpreter cannot run Gluon.

Which kernel runs a call, CONFIG["kernel"]:
  "triton"  (default) always the Triton kernels.
  "auto"    the Gluon kernel when the tensors are on an NVIDIA GPU of capability (9, 0) (the name guards
            against ROCm's gfx90a, also (9, 0)), the module is not run by Triton's interpreter, and the call is
            one the Gluon kernel takes: bf16 q and caches, head dim 256, pages of 128, int32 page_table and
            kv_lens, q_len * G <= 64 (G = Hq / Hkv), q and both caches contiguous and 16-byte aligned (TMA
            views the caches as 2-D); the Triton kernels everywhere else.
  "gluon"   always the Gluon kernel; a call it cannot take is a ValueError saying why, before any launch.
Any other value is a ValueError before any launch. The device is asked once per device index (_SM90),
the shapes and dtypes once per key (_ROUTES); contiguity and alignment are read every call.

Why "triton" is the default: the Gluon kernel's persistent form has matched the Triton kernel on a GPU only
where each sequence has one split (gluon_split.py's docstring); until it passes the gate on an sm_90 GPU,
"auto" is a point the offline search proposes there (patterns split_gluon, split_gluon_balanced), not the
baseline. The op's kernel is promoted.py (the Triton kernels with the pointer gather, promoted on the H200
on 2026-12-03).

One file per stage is the source; what the gate, the benchmark and the loop see is one module, rendered
from the stages in the order the contract lists them (workloads/fa4_decode.yaml, modules.stages) into
kernels/fa4_decode/baseline.py (ignored by git; aka renders it again whenever a stage changes). Edit the
stages; a promoted candidate keeps its own full module (or only its CONFIG values, promoted.json).
"""

from __future__ import annotations

import torch

from .gluon_split import _GL_BLOCK_M, _GL_HEAD_D, _GL_PAGE, _gluon_forward
from .triton_split import _INTERPRETED, _triton_forward

# Values used at call time (the entry reads the module global each call, so a search can swap it).
CONFIG = {
    # which kernel runs a call: "triton", "auto" or "gluon" (module docstring)
    "kernel": "triton",
    # The Gluon kernel's K and V ring slots (32 KB each per ring, beside Q's 32 KB): 2 -> 160 KB of shared
    # memory, 3 -> 224 KB (both fit a CTA's 227 KB; 4 would not). 2 ships: with one CTA an SM it keeps up
    # to 128 KB of K/V in flight, several times an SM's share of HBM bandwidth x latency; 3 is untimed.
    "gluon_stages": 2,
    # setmaxnreg of the loader warp's warpgroup: the item table (five vectors over B <= 128 sequences, four
    # lanes a thread in one warp), the loop counters. ptxas (Triton 3.6.0, sm_90a, offline, G 16 / q_len 1 and
    # 4, G 8 / q_len 4, STAGES 2 and 3): 255 registers a thread at launch over 8 warps (the consumer warpgroup,
    # the loader warp, 3 idle warps), 256 for the consumer; 24 for the loader spilled 16-24 bytes, 48 none.
    # Shared memory 160.2 KB (STAGES 2) / 224.3 KB (3).
    "gluon_regs_load": 48,
    # The Triton kernels' values below (triton_split.py); the Gluon kernel shares the split policy
    # (SPLIT_TARGET, MIN_SPLIT_TOKENS, MAX_SPLITS, SPLIT_POLICY, SPLIT_OVERHEAD_TOKENS)
    # and the merge's REDUCE_BLOCK_S.
    # Tiles with < 64 packed rows (q_len 1: M = G = 8 or 16). H200 sweep 2026-12-02 (graph replay, six
    # shapes of >= 537 MB): TMA boxes with BN 64 / 2 stages best (mean 72.0% of the floor vs 70.3% for
    # the pointer gather at BN 32 / 3 stages; 255 regs, 0 spills, 109 KB smem).
    "BLOCK_N": 64,
    "num_warps": 4,
    "num_stages": 2,
    # Tiles with >= 64 packed rows (q_len 4 x G 16): more compute per byte, registers are the limit.
    # Same sweep: with TMA, 2 stages beat 3 by 3-5% (207.9 / 247.4 / 668.6 vs 214.8 / 261.0 / 705.0 us).
    "BLOCK_N_m64": 32,
    "num_warps_m64": 4,
    "num_stages_m64": 2,
    # Skip the accumulator rescale until the running max grows by > 2^8. Run 3 (with BN 64 / 2 stages):
    # -10..+3% time on the six sweep shapes, mostly faster but within the ~5% run-to-run spread;
    # BN 32 / 3 stages + lazy was not measured, so it stays off.
    "LAZY_RESCALE": False,
    "SPLIT_TARGET": 1056,  # "target" policy: programs wanted (8 per SM); 264 / 528 / 2112 and "waves" were slower
    "MIN_SPLIT_TOKENS": 256,  # no split shorter than this (keeps the merge traffic small)
    "MAX_SPLITS": 256,
    "REDUCE_BLOCK_S": 16,  # splits merged per step in the reduction kernel
    # "target": cdiv(SPLIT_TARGET, B*Hkv); "waves": wave-quantisation model; "balanced": at most the
    # "target" count, chunks sized in the kernel from the real kv_lens (module docstring)
    "SPLIT_POLICY": "target",
    "CTAS_PER_SM": 2,  # "waves" and "balanced" on the Triton kernel: programs resident per SM (Gluon: the SMs)
    "SPLIT_OVERHEAD_TOKENS": 256,  # "waves" and "balanced" policies: fixed cost of a program, in keys
    # K/V blocks through TMA descriptors instead of per-key pointer gathers (module docstring)
    "USE_TMA": True,
    # split-KV merge inside the split kernel (module docstring): one launch instead of two. Correct on
    # the H200 but slower (2026-12-02, graph: D2-q4 557.9 vs 214.8 us, mean 53.8% of the floor vs
    # 70.3%): the last program of each tile merges alone while the SMs idle, and the counter atomics
    # order every split's stores.
    "FUSED_MERGE": False,
}

# Name -> values that compile and pass: the Triton kernel's interpreter-checked (device-checked by
# scripts/bench_fa4_decode.py); the Gluon kernel's fixed by shared memory and registers (module docstring).
SPACE = {
    "kernel": ["triton", "auto", "gluon"],
    "gluon_stages": [2, 3],  # both compile without spills (scripts/device/fa4_decode_gluon_compile.py)
    "gluon_regs_load": [48],
    "BLOCK_N": [16, 32, 64, 128],
    "num_warps": [4, 8],
    "num_stages": [1, 2, 3, 4],
    "BLOCK_N_m64": [16, 32, 64],
    "num_warps_m64": [4, 8],
    "num_stages_m64": [1, 2, 3, 4],
    "LAZY_RESCALE": [False, True],
    "SPLIT_TARGET": [132, 264, 528, 1056, 2112],
    "MIN_SPLIT_TOKENS": [128, 256, 512, 1024],
    "MAX_SPLITS": [64, 256],
    "REDUCE_BLOCK_S": [8, 16, 32],
    "SPLIT_POLICY": ["target", "waves", "balanced"],
    "CTAS_PER_SM": [1, 2, 3],
    "SPLIT_OVERHEAD_TOKENS": [0, 256, 1024],
    "USE_TMA": [False, True],
    "FUSED_MERGE": [False, True],
}


_LOG2E = 1.4426950408889634


# ---------------------------------------------------------------------------------------------------
# Which kernel runs a call. Checked cheaply every call:
# - _SM90: device index -> '' when it is an NVIDIA sm_90 GPU, else why not (asked once a device).
# - _ROUTES: (device index, shapes, dtypes) -> '' when the Gluon kernel takes such a call, else why not.
_SM90 = {}
_ROUTES = {}


def _sm90_unfit(index):
    major, minor = torch.cuda.get_device_capability(index)
    name = torch.cuda.get_device_name(index)
    if (major, minor) != (9, 0) or "NVIDIA" not in name:
        return f"{name} (capability {major}.{minor}) is not an NVIDIA sm_90 GPU"
    return ""


def _shapes_unfit(q_shape, k_shape, v_shape, pt_shape, kvl_shape, dtypes):
    if len(q_shape) != 3 or len(k_shape) != 4 or v_shape != k_shape:
        return "q must be [B * q_len, Hq, D] and both caches [pages, page, Hkv, D] alike"
    rows, hq, d = q_shape
    page, hkv, dk = k_shape[1], k_shape[2], k_shape[3]
    if d != _GL_HEAD_D or dk != _GL_HEAD_D:
        return f"head dim {d}/{dk}, the kernel's is {_GL_HEAD_D}"
    if page != _GL_PAGE:
        return f"pages of {page} tokens, the kernel's are {_GL_PAGE}"
    if hkv == 0 or hq % hkv:
        return f"{hq} query heads do not group over {hkv} KV heads"
    if len(kvl_shape) != 1 or len(pt_shape) != 2 or pt_shape[0] != kvl_shape[0]:
        return "page_table must be [B, max_pages] and kv_lens [B]"
    batch = kvl_shape[0]
    if batch == 0 or rows % batch:
        return f"{rows} q rows are not q_len rows for each of {batch} sequences"
    q_len, g = rows // batch, hq // hkv
    if q_len * g > _GL_BLOCK_M:
        return f"q_len {q_len} x group {g} = {q_len * g} packed rows, the kernel's tile holds {_GL_BLOCK_M}"
    if dtypes[:3] != (torch.bfloat16, torch.bfloat16, torch.bfloat16):
        return f"q, k_cache, v_cache are {dtypes[0]}, {dtypes[1]}, {dtypes[2]}, not bfloat16"
    if dtypes[3:] != (torch.int32, torch.int32):
        return f"page_table, kv_lens are {dtypes[3]}, {dtypes[4]}, not int32"
    return ""


def _gluon_unfit(q, k_cache, v_cache, page_table, kv_lens):
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
    key = (index, q.shape, k_cache.shape, v_cache.shape, page_table.shape, kv_lens.shape, q.dtype, k_cache.dtype,
           v_cache.dtype, page_table.dtype, kv_lens.dtype)
    why = _ROUTES.get(key)
    if why is None:
        if len(_ROUTES) >= 256:
            _ROUTES.clear()
        why = _ROUTES[key] = _shapes_unfit(key[1], key[2], key[3], key[4], key[5], key[6:])
    if why:
        return why
    if not (q.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous()):
        return "q, k_cache and v_cache must be contiguous (TMA views the caches as 2-D)"
    if (q.data_ptr() | k_cache.data_ptr() | v_cache.data_ptr()) & 15:
        return "q, k_cache and v_cache must start at 16-byte aligned addresses (TMA)"
    return ""


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    """Paged decode for q_len 1 or 4. Shapes in the module docstring; returns o like q. Runs the kernel
    CONFIG["kernel"] picks (module docstring); no host sync either way."""
    cfg = CONFIG
    kernel = cfg.get("kernel", "triton")
    if kernel == "auto":
        if not _gluon_unfit(q, k_cache, v_cache, page_table, kv_lens):
            return _gluon_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, cfg)
    elif kernel == "gluon":
        unfit = _gluon_unfit(q, k_cache, v_cache, page_table, kv_lens)
        if unfit:
            raise ValueError(f"fa4_decode: CONFIG['kernel'] is 'gluon' but the Gluon kernel cannot run this call: "
                             f"{unfit}; use 'auto' (Gluon where it can, else Triton) or 'triton'")
        return _gluon_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, cfg)
    elif kernel != "triton":
        raise ValueError(f"fa4_decode: CONFIG['kernel'] is 'auto', 'triton' or 'gluon', not {kernel!r}")
    return _triton_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, cfg)

