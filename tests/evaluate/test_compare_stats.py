"""ABBA ordering and the ratio / interval statistics of aka.evaluate.host.compare, on synthetic timings."""

from __future__ import annotations

import random

import pytest

from aka.evaluate.host.bench import BenchConfig
from aka.evaluate.host.compare import abba_order, geomean_ci, interleave, round_ratios, shape_ratio, summarise


def test_abba_order_repeats_a_b_b_a():
    assert abba_order(2) == ["A", "B", "B", "A", "A", "B", "B", "A"]


def test_round_ratio_cancels_linear_drift():
    # A takes 100 µs, B 80 µs, and the clock slows by 1 µs per call: ABBA keeps the true 0.8 exactly.
    t = 0
    a, b = [], []
    for who in abba_order(5):
        t += 1
        (a if who == "A" else b).append((100 if who == "A" else 80) * (1 + t / 100))
    assert all(r == pytest.approx(0.8, rel=0.02) for r in round_ratios(a, b))
    # the naive ratio of medians is biased by the drift; the round ratios are not
    assert round_ratios(a, b)[0] != pytest.approx(b[0] / a[0], rel=1e-3)


def test_round_ratios_rejects_unpaired_samples():
    with pytest.raises(ValueError):
        round_ratios([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])


def _noisy(ratio: float, rounds: int, noise: float, seed: int):
    rng = random.Random(seed)
    a, b = [], []
    for _ in range(rounds):
        a += [100 * (1 + rng.gauss(0, noise)) for _ in range(2)]
        b += [100 * ratio * (1 + rng.gauss(0, noise)) for _ in range(2)]
    return a, b


def test_shape_ratio_interval_covers_the_truth_most_of_the_time():
    hits = 0
    for seed in range(40):
        r = shape_ratio("X", *_noisy(0.9, 30, 0.02, seed), resamples=300)
        hits += r.ci_low <= 0.9 <= r.ci_high
    assert hits >= 32  # a 95% interval; the bootstrap of a median under-covers a little at 30 rounds


def test_shape_ratio_noise_shrinks_with_rounds():
    few = [shape_ratio("X", *_noisy(0.9, 10, 0.02, s)) for s in range(6)]
    many = [shape_ratio("X", *_noisy(0.9, 200, 0.02, s)) for s in range(6)]
    assert all(m.ratio == pytest.approx(0.9, rel=0.01) for m in many)
    # ~ 1/sqrt(rounds): 20x the rounds should narrow the interval ~4.5x; the bootstrap of a median
    # at 10 rounds is coarse, so ask for 2x on the average over seeds
    assert sum(m.noise for m in many) < sum(f.noise for f in few) / 2


def test_geomean_and_interval():
    per_shape = [[0.5] * 8, [2.0] * 8, [0.9] * 8]  # noise-free: the interval collapses on the point
    point, lo, hi = geomean_ci(per_shape)
    assert point == pytest.approx(0.9 ** (1 / 3))
    assert lo == pytest.approx(point) and hi == pytest.approx(point)


def test_summarise_excludes_one_when_b_is_clearly_faster():
    cmp = summarise({"S1": _noisy(0.8, 40, 0.03, 2), "S2": _noisy(0.85, 40, 0.03, 3)}, kind="gpu-eager")
    assert cmp.ci_high < 1.0 and cmp.geomean == pytest.approx((0.8 * 0.85) ** 0.5, rel=0.02)
    same = summarise({"S1": _noisy(1.0, 40, 0.03, 4)}, kind="gpu-eager")
    assert same.ci_low < 1.0 < same.ci_high


class _Recorder:
    kind = "gpu-eager"

    def __init__(self):
        self.log = []

    def measure(self, call):
        self.log.append(call())
        return {"A": 100.0, "B": 50.0}[self.log[-1][0]]


def _ab(copies: int = 2):
    return [lambda i=i: ("A", i) for i in range(copies)], [lambda i=i: ("B", i) for i in range(copies)]


def test_interleave_runs_abba_on_shared_input_copies():
    rec = _Recorder()
    cfg = BenchConfig(warmup=1, warmup_ms=0.0, min_iters=8, max_iters=16, input_copies=2)
    a, b = interleave(*_ab(), cfg, rec)
    who = [w for w, _ in rec.log]
    assert who == abba_order(len(who) // 4)
    copies = [i for _, i in rec.log]
    assert copies[:8] == [0, 0, 0, 0, 1, 1, 1, 1]  # A and B see the same copy within a round
    assert set(round_ratios(a, b)) == {0.5}


def test_interleave_warms_both_sides_by_time_before_its_rounds():
    rec = _Recorder()
    cfg = BenchConfig(warmup=1, warmup_ms=0.2, min_iters=8, max_iters=8, input_copies=2)
    a, b = interleave(*_ab(), cfg, rec)
    warm = rec.log[: len(rec.log) - len(a) - len(b)]
    assert warm == [("A", 0), ("A", 1), ("B", 0), ("B", 1), ("B", 0), ("B", 1)]  # 0.2 ms each: 2 x 100, 4 x 50 µs
