"""Timing core: warm-up, L2 flush, input rotation, device-wide synchronisation, adaptive medians.

One timed call on a GPU is: flush L2 (write a buffer ``flush_factor`` x the L2 size), synchronise the
device, record a start event, make the call, record an event on the caller's stream, synchronise the
*device* (not just the stream), record the end event. The device-wide synchronisation is what makes
work a kernel hides on a side stream count (KernelBench's adversarial kernels did exactly that); the
price is a constant (the sync's round trip: 12-20 µs on an H100's host, more on the H200's) inside
every sample, the same for every implementation. The event on the caller's stream closes the
interval the host's cost per call is read from (eager minus graph replay, reported, never ranked):
that round trip is the timer's, not the call's.

Every :class:`Timing` carries a ``kind``; only "gpu-eager" and "gpu-graph" are GPU numbers
(:func:`is_gpu_timing`). CPU runs ("interpreter", "cpu") are printed but must never be compared
with GPU numbers or used for a promotion.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from aka.evaluate.wire import Timing, TimingKind

GPU_KINDS = ("gpu-eager", "gpu-graph")
NOT_REPRESENTATIVE = "interpreter, not representative"


class BenchConfig(BaseModel):
    """How a shape is timed (defaults for the H200; :meth:`for_cpu` for interpreter runs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    warmup: int = Field(3, ge=1, description="untimed calls per input copy first: compilation, autotuning, allocation")
    warmup_ms: float = Field(
        30.0, ge=0, description="then untimed calls, measured as the timed ones are, until their time adds up to "
        "this many milliseconds per implementation (GPU timings): a short timing took its median from the slow "
        "first calls")
    min_iters: int = Field(20, ge=1, description="timed calls before the stop rule is consulted")
    max_iters: int = Field(400, ge=1, description="never more timed calls than this")
    time_cap_s: float = Field(3.0, gt=0, description="stop adding calls after this much wall time per timing")
    median_rse_target: float = Field(
        0.003, gt=0, description="stop once the median's relative standard error (from the IQR) is below this"
    )
    check_every: int = Field(10, ge=1, description="timed calls between two checks of the stop rule")
    input_copies: int = Field(3, ge=1, description="input sets rotated between calls so none is warm in L2")
    flush_factor: float = Field(2.0, ge=0, description="L2 flush buffer size as a multiple of the L2 size")
    graph: bool = Field(True, description="also time CUDA-graph replay (reported beside eager, labelled)")
    eager_iters: int | None = Field(
        None, ge=1, description="exactly this many timed eager calls per implementation: the loop's screen of an op "
        "ranked on graph replay, where the eager median only gives the host's cost per call")

    @classmethod
    def for_cpu(cls) -> BenchConfig:
        """Interpreter runs are minutes per call at full size: one warm-up, a few samples."""
        return cls(warmup=1, warmup_ms=0.0, min_iters=2, max_iters=3, time_cap_s=30.0, input_copies=1, graph=False)


def is_gpu_timing(t: Timing | dict[str, Any] | None) -> bool:
    """True only for numbers measured on a GPU; the Supervisor must refuse everything else."""
    if t is None:
        return False
    kind = t.get("kind") if isinstance(t, dict) else t.kind
    return kind in GPU_KINDS


def quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3) with linear interpolation (numpy's default), for any n >= 1."""
    s = sorted(xs)
    if not s:
        raise ValueError("quartiles of an empty sample")

    def at(p: float) -> float:
        pos = p * (len(s) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return at(0.25), at(0.5), at(0.75)


def median_rse(xs: Sequence[float]) -> float:
    """Relative standard error of the median: 1.2533 sigma / sqrt(n), sigma estimated as IQR / 1.349.

    The IQR estimate resists the outliers (a preemption, a clock dip) that a standard deviation
    would let dominate; with fewer than 4 samples the estimate is meaningless, so it is infinite.
    """
    if len(xs) < 4:
        return math.inf
    q1, med, q3 = quartiles(xs)
    if med <= 0:
        return math.inf
    return 1.2533 * ((q3 - q1) / 1.349) / math.sqrt(len(xs)) / med


class Timer(Protocol):
    """Measures one call; tests inject a fake one."""

    kind: TimingKind

    def measure(self, call: Callable[[], Any]) -> float:
        """Microseconds that ``call()`` took, measured the timer's way."""
        ...


class HostTimer:
    """perf_counter around the call: CPU runs (Triton interpreter, CPU torch)."""

    def __init__(self, kind: TimingKind = "interpreter"):
        self.kind: TimingKind = kind

    def measure(self, call: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        call()
        return (time.perf_counter() - t0) * 1e6


Hooks = tuple[Callable[[int, int], None], Callable[[int, int], None]]  # (call index, input copy)


def time_fn(
    calls: Sequence[Callable[[], Any]],
    cfg: BenchConfig,
    timer: Timer,
    clock: Callable[[], float] = time.monotonic,
    hooks: Hooks | None = None,
) -> Timing:
    """Warm up every call, then time them in rotation until the median is stable or a cap is hit.

    ``calls`` holds one zero-argument callable per input copy (preparation already done), so that
    consecutive timed calls read different buffers.
    """
    return time_interleaved({"_": calls}, cfg, {"_": timer}, clock, {"_": hooks} if hooks else None)["_"]


def time_interleaved(
    calls: dict[str, Sequence[Callable[[], Any]]],
    cfg: BenchConfig,
    timers: dict[str, Timer],
    clock: Callable[[], float] = time.monotonic,
    hooks: dict[str, Hooks] | None = None,
) -> dict[str, Timing]:
    """Time several implementations in alternating blocks of ``check_every`` calls (A B C A B C ...).

    Timing them one after another lets clock or thermal drift land on one side only: the same
    kernel timed twice in a row on the H200 gave 1045.0 vs 1021.5 µs at G5 (2026-11-29). In
    alternating blocks every implementation samples the same conditions. Each keeps its own stop
    rule (converged, max_iters, or time_cap_s of its own measuring time).

    ``hooks[name] = (before, after)`` run around each timed call of ``name`` with the call's index and
    its input copy,
    outside the timed interval and outside the time cap (aka.evaluate.host.rotation refreshes the inputs there).
    """
    if not calls or any(not c for c in calls.values()):
        raise ValueError("time_interleaved needs at least one call per implementation")
    for name, cs in calls.items():
        warm_up(cs, cfg, timers[name])
    samples: dict[str, list[float]] = {name: [] for name in calls}
    in_call: dict[str, list[float]] = {name: [] for name in calls}
    stream: dict[str, list[float]] = {name: [] for name in calls}
    spent = dict.fromkeys(calls, 0.0)
    stops: dict[str, str] = {}
    while len(stops) < len(calls):
        for name, cs in calls.items():
            if name in stops:
                continue
            xs = samples[name]
            before, after = (hooks or {}).get(name) or (None, None)
            for _ in range(cfg.check_every):
                i = len(xs)
                if before:
                    before(i, i % len(cs))
                t0 = clock()
                xs.append(timers[name].measure(cs[i % len(cs)]))
                spent[name] += clock() - t0
                if (h := getattr(timers[name], "in_call_us", None)) is not None:
                    in_call[name].append(h)
                if (u := getattr(timers[name], "stream_us", None)) is not None:
                    stream[name].append(u)
                if after:
                    after(i, i % len(cs))
                stop = _stop_rule(xs, cfg, spent[name])
                if stop:
                    stops[name] = stop
                    break
    return {name: make_timing(timers[name].kind, samples[name], stops[name], in_call[name], stream[name])
            for name in calls}


def warm_up(calls: Sequence[Callable[[], Any]], cfg: BenchConfig, timer: Timer) -> None:
    """``cfg.warmup`` untimed calls per input copy, then, on a GPU, calls measured by ``timer`` (and
    discarded) until they add up to ``cfg.warmup_ms``. Three calls per copy were not enough on the H200
    (2026-12-04): the loop's set-up and screen (8-12 samples) read fa4_decode's promoted kernel at D10-q1
    304 µs in 7 of 11 processes, D10-q4 329 and D6-q1 196 in 10 of 11, where 30 calls per copy first (90
    replays, 25-28 ms at D10) gave 274-277, 311-312 and 185-186 in 4 of 4, as `aka bench`'s longer
    sampling does: the first replays of each freshly captured graph run up to 10% slower. 30 ms is at
    least as many replays on every shape of up to 330 µs."""
    for call in calls:
        for _ in range(cfg.warmup):
            call()
    if timer.kind not in GPU_KINDS:  # the interpreter's calls take seconds, and its times rank nothing
        return
    spent_us, budget_us, i = 0.0, cfg.warmup_ms * 1e3, 0
    while spent_us < budget_us and i < 100_000:  # a call of a few µs stops at the count, not the clock
        spent_us += timer.measure(calls[i % len(calls)])
        i += 1


def _stop_rule(xs: Sequence[float], cfg: BenchConfig, spent_s: float) -> str | None:
    n = len(xs)
    if n >= cfg.max_iters:
        return "max_iters"
    if n < cfg.min_iters:
        return None
    if (n - cfg.min_iters) % cfg.check_every == 0 and median_rse(xs) <= cfg.median_rse_target:
        return "converged"
    if spent_s >= cfg.time_cap_s:  # checked every call: one interpreter call can take seconds
        return "time_cap"
    return None


def make_timing(kind: TimingKind, samples: Sequence[float], stop: str, in_call: Sequence[float] = (),
                stream: Sequence[float] = ()) -> Timing:
    """The samples' quartiles; ``in_call``: the host's µs inside each call, ``stream``: each call's interval
    closed on the caller's stream (CudaTimer.stream_us), where the timer measured them."""
    q1, med, q3 = quartiles(samples)
    return Timing(kind=kind, median_us=med, q1_us=q1, q3_us=q3, n=len(samples), stop=stop,
                  samples_us=[round(x, 3) for x in samples],
                  in_call_us=round(statistics.median(in_call), 3) if in_call else None,
                  stream_us=round(statistics.median(stream), 3) if stream else None)


def geomean(xs: Sequence[float]) -> float:
    """Geometric mean of positive numbers; NaN for an empty list."""
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    if not xs:
        return math.nan
    return math.exp(statistics.fmean(math.log(x) for x in xs))


class CudaTimer:
    """CUDA events around a device-wide synchronisation, with an L2 flush before every call.

    The flush is followed by a synchronisation too: otherwise a kernel launched on a side stream
    could start while the flush still runs on the default stream, before the start event fires,
    and part of its time would escape the measurement.
    """

    kind: TimingKind = "gpu-eager"
    in_call_us: float | None = None  # the host's time inside the last measured call (µs)
    # the last call's interval closed on the caller's stream right after the call, before the device-wide
    # sync (µs): what the host's cost per call is read from (module docstring)
    stream_us: float | None = None

    def __init__(self, flush_bytes: int):
        import torch

        self._torch = torch
        self._flush = torch.empty(max(flush_bytes // 4, 1), dtype=torch.int32, device="cuda")
        self._start = torch.cuda.Event(enable_timing=True)
        self._after = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def measure(self, call: Callable[[], Any]) -> float:
        cuda = self._torch.cuda
        self._flush.fill_(1)  # a write of every line evicts whatever the last call left in L2
        cuda.synchronize()
        self._start.record()
        t0 = time.perf_counter()
        call()
        self.in_call_us = (time.perf_counter() - t0) * 1e6
        self._after.record()  # the caller's stream: its work done, without the sync's round trip
        cuda.synchronize()  # device-wide: work on any stream is inside the interval
        self._end.record()
        self._end.synchronize()
        self.stream_us = self._start.elapsed_time(self._after) * 1e3
        return self._start.elapsed_time(self._end) * 1e3


class GraphTimer(CudaTimer):
    """Replays of a CUDA graph captured from each call: launch gaps removed, labelled gpu-graph.

    The interval holds the replay's GPU work only. Before the start event the GPU spins for
    SPIN_CYCLES, so the host's submission of the start event and the replay (10-40 µs on the H200's
    host, 2026-12-03) happens while the GPU is still busy; the end event follows the replay on the
    same stream, where the replay's every node, on whatever stream it was captured, has finished
    (a capture refuses a stream left unjoined). CudaTimer's device-wide synchronisation before its
    end event is needed for eager calls only; here it would add the host's wake-up latency.
    """

    kind: TimingKind = "gpu-graph"
    in_call_us = stream_us = None  # a replay's submission is not the implementation's host work
    SPIN_CYCLES = 200_000  # ~100 µs at the H200's 1.98 GHz: longer than the host's submission

    def __init__(self, flush_bytes: int):
        super().__init__(flush_bytes)
        self._graphs: dict[int, Any] = {}
        self._spin = getattr(self._torch.cuda, "_sleep", None)  # a private torch helper; absent: no spin

    def measure(self, call: Callable[[], Any]) -> float:
        cuda = self._torch.cuda
        self._flush.fill_(1)  # a write of every line evicts whatever the last call left in L2
        cuda.synchronize()
        if self._spin is not None:
            self._spin(self.SPIN_CYCLES)
        self._start.record()
        call()
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) * 1e3

    def capture(self, calls: Sequence[Callable[[], Any]]) -> list[Callable[[], Any]]:
        """One graph per input copy; raises RuntimeError (e.g. work on an unjoined stream)."""
        torch = self._torch
        replays = []
        for call in calls:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                call()
            self._graphs[id(graph)] = graph  # keep the graph (and its memory pool) alive
            replays.append(graph.replay)
        torch.cuda.synchronize()
        return replays


def l2_bytes(default: int = 64 * 2**20) -> int:
    """The current device's L2 size (torch exposes it on recent versions), else ``default``."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or default)
