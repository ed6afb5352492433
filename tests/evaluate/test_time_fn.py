"""time_fn's warm-up, rotation and adaptive stop rule, driven by a fake timer and a fake clock."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from aka.evaluate.host.bench import BenchConfig, is_gpu_timing, median_rse, quartiles, time_fn
from aka.evaluate.wire import Timing


class FakeTimer:
    """Returns scripted samples; counts which input copy each timed call used."""

    kind = "gpu-eager"

    def __init__(self, sample):
        self.sample = sample
        self.used = []

    def measure(self, call):
        self.used.append(call())
        return self.sample()


class FakeClock:
    def __init__(self, step: float):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


def _calls(n):
    warm = []
    return warm, [lambda i=i: (warm.append(i), i)[1] for i in range(n)]


def test_steady_timings_stop_at_min_iters_after_warmup():
    warm, calls = _calls(3)
    timer = FakeTimer(lambda: 100.0)
    cfg = BenchConfig(warmup=2, warmup_ms=0.0, min_iters=12, max_iters=500)
    t = time_fn(calls, cfg, timer, clock=FakeClock(0.0))
    assert (t.n, t.stop, t.median_us) == (12, "converged", 100.0)
    assert len(warm) == 2 * 3 + 12  # every copy warmed twice, then the 12 timed calls
    assert timer.used[:6] == [0, 1, 2, 0, 1, 2]  # rotation among the input copies


def test_the_time_warm_up_is_measured_like_the_timed_calls_and_never_sampled():
    warm, calls = _calls(3)
    timer = FakeTimer(lambda: 1000.0)
    cfg = BenchConfig(warmup=1, warmup_ms=5.0, min_iters=4, max_iters=4, check_every=4)
    t = time_fn(calls, cfg, timer, clock=FakeClock(0.0))
    assert timer.used[:5] == [0, 1, 2, 0, 1]  # 5 ms of 1 ms calls through the timer, over the copies
    assert len(timer.used) == 5 + 4 and t.n == 4 and len(warm) == 3 + 5 + 4


def test_slow_first_calls_land_in_the_warm_up_not_in_a_short_median():
    """The H200's first replays of a fresh graph (fa4_decode D10-q1: ~304 µs, then 275): a screen of 8
    samples after three warm-up calls per copy took its median from them."""
    def first_slow():
        calls = iter([300.0] * 20 + [275.0] * 1000)
        return FakeTimer(lambda: next(calls))

    short = dict(warmup=1, min_iters=8, max_iters=8, check_every=4)
    assert time_fn(_calls(3)[1], BenchConfig(**short, warmup_ms=0.0), first_slow()).median_us == 300.0
    assert time_fn(_calls(3)[1], BenchConfig(**short, warmup_ms=5.0), first_slow()).median_us == 275.0


def test_interpreter_timings_get_no_time_warm_up():
    timer = FakeTimer(lambda: 1000.0)
    timer.kind = "interpreter"
    time_fn(_calls(2)[1], BenchConfig(warmup=1, warmup_ms=25.0, min_iters=2, max_iters=2), timer)
    assert len(timer.used) == 2  # the timed calls only: its calls take seconds and rank nothing


def test_noisy_timings_take_more_samples_until_the_median_is_stable():
    rng = random.Random(0)
    cfg = BenchConfig(warmup=1, min_iters=10, max_iters=2000, median_rse_target=0.005, check_every=10)
    t = time_fn(_calls(1)[1], cfg, FakeTimer(lambda: 100 * (1 + rng.gauss(0, 0.05))), clock=FakeClock(0.0))
    assert t.stop == "converged" and t.n > 50  # 5% noise needs ~100 samples for a 0.5% median error
    assert median_rse(t.samples_us) <= 0.005
    assert t.median_us == pytest.approx(100, rel=0.02)


def test_time_cap_stops_a_never_converging_timing():
    rng = random.Random(1)
    cfg = BenchConfig(warmup=1, min_iters=10, max_iters=10_000, time_cap_s=1.0, median_rse_target=1e-6)
    t = time_fn(_calls(1)[1], cfg, FakeTimer(lambda: rng.uniform(50, 150)), clock=FakeClock(0.05))
    assert t.stop == "time_cap" and t.n < 100


def test_max_iters_caps_samples():
    rng = random.Random(2)
    cfg = BenchConfig(warmup=1, min_iters=5, max_iters=30, median_rse_target=1e-9)
    t = time_fn(_calls(1)[1], cfg, FakeTimer(lambda: rng.uniform(50, 150)), clock=FakeClock(0.0))
    assert (t.stop, t.n) == ("max_iters", 30)


def test_quartiles_match_numpy():
    xs = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    assert quartiles(xs) == pytest.approx(tuple(np.percentile(xs, [25, 50, 75])))
    assert quartiles([4.0]) == (4.0, 4.0, 4.0)
    assert math.isinf(median_rse([1.0, 2.0, 3.0]))


def test_only_gpu_kinds_count_as_gpu_timings():
    base = dict(median_us=1.0, q1_us=1.0, q3_us=1.0, n=1, stop="converged")
    assert is_gpu_timing(Timing(kind="gpu-eager", **base))
    assert is_gpu_timing({"kind": "gpu-graph"})
    assert not is_gpu_timing(Timing(kind="interpreter", **base))
    assert not is_gpu_timing({"kind": "cpu"})
    assert not is_gpu_timing(None)


class DriftingDevice:
    """One device whose calls get slower as it warms: every measured call costs 1000 µs + 1 µs per call so far."""

    def __init__(self):
        self.calls = 0

    def timer(self):
        dev = self

        class _T:
            kind = "gpu-eager"

            def measure(self, call):
                call()
                dev.calls += 1
                return 1000.0 + dev.calls

        return _T()


def test_interleaved_blocks_put_drift_on_both_sides():
    from aka.evaluate.host.bench import time_interleaved

    cfg = BenchConfig(warmup=1, min_iters=60, max_iters=60, check_every=10, time_cap_s=1e9, median_rse_target=1e-9)
    _, calls = _calls(2)
    seq = DriftingDevice()  # one after the other: the second copy of the same kernel looks 6% slower
    a, b = time_fn(calls, cfg, seq.timer()), time_fn(calls, cfg, seq.timer())
    assert b.median_us / a.median_us > 1.05
    dev = DriftingDevice()  # alternating blocks of 10: the two medians differ by one block at most
    both = time_interleaved({"a": calls, "b": calls}, cfg, {"a": dev.timer(), "b": dev.timer()})
    assert abs(both["b"].median_us / both["a"].median_us - 1) < 0.011
    assert both["a"].n == both["b"].n == 60 and both["a"].stop == "max_iters"
