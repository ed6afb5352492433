"""What both kernels' launchers share: log2(e) for the base-2 softmax, the split count from shapes (both
kernels size their partials with it), the SM count, the plan numbering, and the launch path (_Launch, keyed by
_arg_key) that skips Triton's per-call binding once a kernel is compiled."""

from __future__ import annotations

import functools

import torch
import triton

from aka.launch import Launcher

_LOG2E = 1.4426950408889634

# Plans (per shape and CONFIG: split count, grids, constexprs, scratch sizes) are kept per kernel
# (triton_split.py's _PLANS, gluon_split.py's _GL_PLANS), each cleared when it holds _PLANS_MAX (a server sees
# few distinct shapes; a sweep that sees more just starts over). A plan's number comes from the one counter
# below and is never reused, so a launch cache keyed on it never meets another plan's code.
_PLANS_MAX = 256
_PLAN_COUNT = [0]


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
    base = a.base  # a host TensorDescriptor
    return (base.dtype, base.data_ptr() & 15, *a.shape, *a.strides, *a.block_shape)


class _Launch:
    """Launches one kernel through aka.launch's Launcher (the first call of a key through Triton's JIT,
    later ones through Triton's C launcher with the stream lookup, launch metadata and each descriptor's
    tensor map kept: 6-11 us of host less a call than Triton's compiled runner for the op's Triton kernels on
    an H100, 2026-12-07, docs/perf/host.md), keyed by the plan (constexprs, warps, stages) and every
    argument's _arg_key, so a call Triton would compile differently never reuses the wrong code. The
    interpreter compiles nothing: there every call takes the JIT path."""

    def __init__(self, fn):
        self.fn = fn
        self.kept = Launcher(fn)
        self.hits = self.kept.hits  # key -> the compiled kernel's kept launch

    def __call__(self, grid, plan_key, args, kw):
        self.kept(grid, args, kw, (plan_key, tuple(map(_arg_key, args))))


def num_splits_for(batch, hkv, max_kv, cfg, num_sms=132, block_n=None):
    """Split count from shapes only (max_kv is the page table's capacity, an upper bound).

    "target": fill SPLIT_TARGET programs. "waves": minimise waves x (keys per split + a fixed
    per-program cost), so that B*Hkv*S does not spill a few programs into an extra wave.
    Either way at least MIN_SPLIT_TOKENS keys per split and at most MAX_SPLITS splits.
    """
    block_n = cfg["BLOCK_N"] if block_n is None else block_n
    cap = max(1, min(triton.cdiv(max_kv, max(cfg["MIN_SPLIT_TOKENS"], block_n)), cfg["MAX_SPLITS"]))
    if cfg.get("SPLIT_POLICY", "target") == "waves":
        return _waves_splits(batch * hkv, max_kv, cap, num_sms * cfg["CTAS_PER_SM"], cfg["SPLIT_OVERHEAD_TOKENS"])
    # "target", and "balanced" whose kernels only ever lengthen the chunk (fewer splits in use)
    want = triton.cdiv(cfg["SPLIT_TARGET"], batch * hkv)
    return max(1, min(want, cap))


@functools.lru_cache(maxsize=1024)
def _waves_splits(base, max_kv, cap, slots, overhead):
    best_cost, best_s = None, 1
    for s in range(1, cap + 1):
        cost = triton.cdiv(base * s, slots) * (triton.cdiv(max_kv, s) + overhead)
        if best_cost is None or cost < best_cost:
            best_cost, best_s = cost, s
    return best_s


@functools.lru_cache(maxsize=16)
def _num_sms(device):
    if device.type != "cuda":
        return 132  # interpreter runs: an H200's count
    return torch.cuda.get_device_properties(device).multi_processor_count


def _partials(rows, hq, splits, d):
    """(scratch length, o-partial length, strides) of the split partials, both kernels' layout: one fp32
    allocation, o_part [rows, hq, S, d] then lse_part [rows, hq, S], both contiguous, so their strides (and
    every address the kernels compute) are those of two separate torch.empty calls; one allocation per call
    instead of two. With one split there are none (zeros)."""
    if splits <= 1:
        return 0, rows * hq * splits * d, (0,) * 5
    n_o = rows * hq * splits * d
    return n_o + rows * hq * splits, n_o, (splits * d * hq, splits * d, d, splits * hq, splits)


def _scratch(o, splits, ws_len, n_o):
    """(o_part, lse_part) views of one fresh fp32 allocation (_partials' layout), or o twice as unused
    placeholders with one split. Fresh per call, not cached: the contract keeps streams out of reach, so a
    cached buffer could not tell two streams apart (the caching allocator recycles blocks per stream)."""
    if splits <= 1:
        return o, o
    ws = torch.empty(ws_len, dtype=torch.float32, device=o.device)
    return ws.narrow(0, 0, n_o), ws.narrow(0, n_o, ws_len - n_o)
