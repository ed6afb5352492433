"""A against B in one process, on the same inputs, interleaved A B B A so that drift cancels.

A round is four timed calls A1 B1 B2 A2; its ratio (B1 + B2) / (A1 + A2) is immune to a linear
drift of the clock or the temperature across the round (AKA's verifier uses the same order). The
ratio of a shape is the median over rounds; its noise is the bootstrap spread of that median. The
geomean over shapes gets a bootstrap confidence interval by resampling rounds within every shape.
Ratios are time_B / time_A: below 1 means B is faster. The statistics are pure functions.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from aka.evaluate.host.bench import BenchConfig, Timer, median_rse, warm_up
from aka.evaluate.wire import Comparison, ShapeRatio

ABBA = ("A", "B", "B", "A")


def abba_order(rounds: int) -> list[str]:
    """The call order of ``rounds`` ABBA rounds: A B B A A B B A ..."""
    return list(ABBA) * rounds


def round_ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-round ratios from samples in ABBA order: a holds (A1, A2) pairs, b holds (B1, B2) pairs."""
    if len(a) != len(b) or len(a) % 2:
        raise ValueError("round_ratios needs two samples of A and two of B per round")
    return [(b[i] + b[i + 1]) / (a[i] + a[i + 1]) for i in range(0, len(a), 2)]


def bootstrap_median(xs: Sequence[float], resamples: int, rng: random.Random) -> list[float]:
    """Medians of ``resamples`` resamples (with replacement) of xs."""
    n = len(xs)
    return [statistics.median(rng.choices(xs, k=n)) for _ in range(resamples)]


def percentile(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    pos = p * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def shape_ratio(shape: str, a: Sequence[float], b: Sequence[float], resamples: int = 1000,
                seed: int = 0) -> ShapeRatio:
    ratios = round_ratios(a, b)
    boot = bootstrap_median(ratios, resamples, random.Random(seed))
    lo, hi = percentile(boot, 0.025), percentile(boot, 0.975)
    med = statistics.median(ratios)
    return ShapeRatio(shape=shape, ratio=med, noise=(hi - lo) / 2 / med, ci_low=lo, ci_high=hi,
                      rounds=len(ratios), a_median_us=statistics.median(a), b_median_us=statistics.median(b))


def geomean_ci(per_shape: Sequence[Sequence[float]], resamples: int = 1000, seed: int = 0
               ) -> tuple[float, float, float]:
    """Geomean of per-shape median ratios and its 95% bootstrap interval (rounds resampled per shape).

    The interval is measurement noise only: the shapes are the fixed evaluation set, not a sample.
    """
    rng = random.Random(seed)

    def gm(medians: Sequence[float]) -> float:
        return math.exp(statistics.fmean(math.log(m) for m in medians))

    point = gm([statistics.median(r) for r in per_shape])
    boots = [gm([statistics.median(rng.choices(r, k=len(r))) for r in per_shape]) for _ in range(resamples)]
    return point, percentile(boots, 0.025), percentile(boots, 0.975)


def summarise(samples: dict[str, tuple[list[float], list[float]]], kind: str, resamples: int = 1000
              ) -> Comparison:
    """Comparison from {shape: (A samples, B samples)}, each in ABBA order."""
    shapes = [shape_ratio(s, a, b, resamples) for s, (a, b) in samples.items()]
    point, lo, hi = geomean_ci([round_ratios(a, b) for a, b in samples.values()], resamples)
    return Comparison(shapes=shapes, geomean=point, ci_low=lo, ci_high=hi, kind=kind)


def interleave(
    calls_a: Sequence[Callable[[], Any]],
    calls_b: Sequence[Callable[[], Any]],
    cfg: BenchConfig,
    timer: Timer,
    clock: Callable[[], float] = time.monotonic,
    hooks: dict[str, tuple[Callable[[int, int], None], Callable[[int, int], None]]] | None = None,
) -> tuple[list[float], list[float]]:
    """Time A and B in ABBA rounds on the same input copies; returns (A samples, B samples).

    Both see input copy i in round i (mod copies), so neither gets a warmer cache. Rounds stop when
    the ratio's median is stable (same rule as time_fn) or at the caps. ``hooks["A"|"B"]`` run
    around each timed call as in aka.evaluate.host.bench.time_interleaved (fresh inputs before every call: A and B
    then see the same values only in expectation, which is what ABBA needs).
    """
    warm_up(calls_a, cfg, timer)
    warm_up(calls_b, cfg, timer)
    a: list[float] = []
    b: list[float] = []
    start = clock()  # the cap counts the hooks' time too: ABBA rounds must stay short in wall time
    min_rounds = max(2, cfg.min_iters // 4)
    for r in range(max(cfg.max_iters // 4, min_rounds)):
        i = r % len(calls_a)
        for who in ABBA:
            xs = a if who == "A" else b
            before, after = (hooks or {}).get(who) or (None, None)
            if before:
                before(len(xs), i)
            xs.append(timer.measure((calls_a if who == "A" else calls_b)[i]))
            if after:
                after(len(xs) - 1, i)
        if r + 1 >= min_rounds and median_rse(round_ratios(a, b)) <= cfg.median_rse_target:
            break
        if clock() - start >= 2 * cfg.time_cap_s:  # two implementations share the round
            break
    return a, b

