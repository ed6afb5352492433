"""The Supervisor: stop conditions and the promotion decision, as pure functions of measurements.

decide() is the only place that says "promote". It reads a Measurements record (what the gate,
the bench and the interleaved comparison reported) and the PromotionRules, and returns a
Decision with its reason; it does no I/O, so every rule has a unit test (tests/run/test_decide.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from aka.contract.shapes import ShapeSet
from aka.records import Attempt, Decision, Measurements, Promoted, RunRecord
from aka.settings import Budget, PromotionRules

__all__ = ["BudgetUsed", "decide", "promotion_meta", "promotion_message", "stop_reason"]

def _no(reason: str, verdict: Literal["rejected", "not promoted"] = "rejected", blocked_by: str = "") -> Decision:
    return Decision(promote=False, verdict=verdict, reason=reason, blocked_by=blocked_by)


def decide(m: Measurements, rules: PromotionRules) -> Decision:
    """Promote only a fully gated, GPU-timed candidate that is measurably faster everywhere that counts."""
    if m.backend_error:
        return _no(f"no usable candidate: {m.backend_error}")
    if m.check_error:
        return _no(f"static check failed: {m.check_error}")
    if m.compile_error:
        return _no(f"compile failed: {m.compile_error}")
    if not m.gate and not m.gate_error and m.timing == "gpu":  # a GPU screen times first and gates only
        if m.bench_error:  # a candidate that could be promoted (aka.evaluate.checker.tasks.screen_worker)
            return _no(f"bench failed: {m.bench_error}")
        if m.screen_refused:
            return _no(f"{m.screen_refused} (not gated)", blocked_by=m.screen_slow_shape)
    failed = [f"{s} round {i + 1}" for s, rounds in m.gate.items() for i, ok in enumerate(rounds) if not ok]
    if not m.gate or failed or m.gate_error:
        shapes = sorted({f.split()[0] for f in failed})
        if m.gate_error:  # the gate's own words name the first failure precisely
            return _no(f"gate failed on {len(shapes) or 'some'} shape(s): {m.gate_error}")
        return _no(f"gate failed ({', '.join(failed[:3]) or 'no gate result'})")
    if m.bench_error:
        return _no(f"bench failed: {m.bench_error}")
    if m.timing == "interpreter":
        return _no("not promoted: interpreter timings cannot promote", "not promoted")
    if m.timing == "gpu" and m.geomean is None and m.screen_gain is not None:
        return _no(f"bench gain {m.screen_gain:+.2%} over the incumbent too small to re-measure")
    if m.timing != "gpu" or m.geomean is None:
        return _no("no interleaved GPU comparison against the incumbent")
    missing = [s for s in m.expected_shapes if s not in m.ratios]
    if missing:
        return _no(f"comparison missing shapes {', '.join(missing)}")
    gain = m.geomean - 1.0
    if gain <= rules.min_gain:
        return _no(f"geomean gain {gain:+.2%} not above min-gain {rules.min_gain:.2%}")
    noise = m.noise or 0.0
    if gain <= noise:
        return _no(f"geomean gain {gain:+.2%} within measured noise {noise:.2%}")
    slow = {s: r for s, r in m.ratios.items() if r < 1.0 - rules.shape_margin}
    if slow and not rules.allow_shape_regression:
        worst = min(slow, key=slow.__getitem__)
        return _no(f"{worst} slower by {1 - slow[worst]:.1%} (margin {rules.shape_margin:.0%})", blocked_by=worst)
    ungated = [s for s in m.expected_shapes if s not in m.gate]
    if ShapeSet.FULL not in m.gate_sets or ungated:  # last: the loop gates the full set only for would-be promotions
        return _no(f"gate covered only {'+'.join(m.gate_sets) or 'nothing'}, not the full set")
    extra = f"; allowed regressions on {', '.join(sorted(slow))}" if slow else ""
    return Decision(promote=True, verdict="promoted", reason=f"geomean gain {gain:+.2%} (noise {noise:.2%}){extra}")


class BudgetUsed(BaseModel):
    """What a run has consumed so far; rebuilt from attempts.jsonl on resume."""

    model_config = ConfigDict(extra="forbid")
    candidates: int = 0
    elapsed_s: float = 0.0
    tokens: int = 0
    since_improvement: int = 0


def stop_reason(budget: Budget, used: BudgetUsed) -> str | None:
    """Why the run must stop now, or None to run another round."""
    if used.candidates >= budget.max_candidates:
        return f"budget of {budget.max_candidates} candidates used"
    if budget.max_time_s is not None and used.elapsed_s >= budget.max_time_s:
        return f"time limit of {budget.max_time_s:.0f} s reached"
    if budget.max_tokens is not None and used.tokens >= budget.max_tokens:
        return f"token limit of {budget.max_tokens} reached"
    if budget.patience is not None and used.since_improvement >= budget.patience:
        return f"no improvement in {budget.patience} attempts (patience)"
    return None


def promotion_meta(run: RunRecord, rec: Attempt,
                   standing: tuple[float, dict[str, float]]) -> Promoted:
    """promoted.json: what was promoted, measured where, and how much faster than what.

    `standing`: the promoted kernel's geomean and per-shape speedup over the baseline: the run's
    starting standing (aka.run.standing) times the ABBA re-measures of its promotions (aka.run.state.rebuild)."""
    times, m = rec.times_us, rec.measurements
    dev = run.device
    timing = run.baseline.rank_timing or "eager"
    # speedups: the ABBA ratios (decide() promotes only with one for every shape), not the screen's
    # times, which drift by several % against timings from other workers
    return Promoted(
        op=run.op, run_id=run.run_id, attempt=rec.n, code_hash=rec.code_hash,
        plan=rec.plan.hypothesis if rec.plan else "", pattern=rec.plan.pattern if rec.plan else None,
        config=rec.config,
        times_us=times, timing=timing,
        # the host's cost per call (eager minus graph replay) from the screen: its own figure, never ranked
        host_us=(rec.bench.host_us if rec.bench else None) or {},
        times_note=f"{timing} medians of the screen, µs; speedups: the ABBA re-measure ({timing} too)",
        speedup_vs_baseline=standing[1], speedup_vs_previous=m.ratios,
        geomean_vs_previous=m.geomean, noise=m.noise,
        geomean_vs_baseline=standing[0], baseline_hash=run.baseline.hash,
        gate=rec.gate,
        device=dev.name, driver=dev.driver, cuda=dev.cuda, torch=dev.torch, triton=dev.triton, python=dev.python,
        decision=rec.decision.reason,
    )


def promotion_message(run: RunRecord, rec: Attempt, meta: Promoted) -> str:
    gain = (meta.geomean_vs_previous or 1.0) - 1.0
    vs_base = meta.geomean_vs_baseline or 0.0
    return (f"{run.op}: promote attempt {rec.n} of run {run.run_id}: geomean {gain:+.1%} vs previous, "
            f"{vs_base:.3f}x vs baseline\n\n{rec.plan.hypothesis if rec.plan else ''}\ncode {rec.code_hash}, "
            f"device {meta.device}")
