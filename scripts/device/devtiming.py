"""Timing helpers shared by the device benchmark scripts (scripts/bench_fa4_*.py).

Medians of CUDA-event timings with the L2 flushed before every call, and the same call replayed
from a CUDA graph. Without a GPU (the scripts' CPU dry run) they fall back to one wall-clock call.
"""

from __future__ import annotations

import time

import torch

_FLUSH = None


def _gpu() -> bool:
    return torch.cuda.is_available()


def bench(fn, iters, flush=True):
    """Median µs of fn over iters calls, a 256 MB write (> 4x the H200's 60 MB L2) before each.

    flush=False times back-to-back calls with nothing queued ahead, so the call's host time shows."""
    global _FLUSH
    if not _gpu():
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e6
    if _FLUSH is None:
        _FLUSH = torch.empty(256 * 2**20 // 4, dtype=torch.float32, device="cuda")
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        if flush:
            _FLUSH.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    times.sort()
    return times[len(times) // 2]


def capture(fn) -> torch.cuda.CUDAGraph:
    """fn captured in a CUDA graph, after one call on a side stream (allocator and JIT warm)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def bench_graph(fn, iters):
    """Median µs of fn captured in a CUDA graph (no host launch cost), L2 flushed; None if capture fails."""
    if not _gpu():
        return None
    try:
        return bench(capture(fn).replay, iters)
    except Exception as e:  # noqa: BLE001
        print(f"graph capture failed: {type(e).__name__}: {str(e)[:120]}", flush=True)
        return None


def fmt(x, f="{:.1f}"):
    return "-" if x is None else f.format(x)
