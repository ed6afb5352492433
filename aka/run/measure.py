"""One prepared candidate measured: the gate and the timing screen, the ABBA re-measure and the
full-set gate only for a candidate that could be promoted, then the Supervisor's decide()."""

from __future__ import annotations

import copy
import time

from aka.evaluate.parent.evaluator import Evaluator
from aka.evaluate.parent.outcomes import speedup
from aka.records import Attempt, BenchRecord, CompareRecord, GateRecord, Measurements, RunRecord
from aka.run.prefetch import Prepared, View
from aka.run.state import State, shape_plan
from aka.run.supervisor import decide
from aka.settings import OptimizeSettings


def measure(prep: Prepared, settings: OptimizeSettings, op, ev: Evaluator, st: State, run: RunRecord,
            view: View) -> Attempt:
    """Gate and time a prepared candidate, then let the Supervisor decide."""
    rec, m, path = prep.rec, prep.m, prep.path
    gate_stages, bench_shapes, rounds = shape_plan(settings)
    screen_rounds = rounds if settings.interpreter else min(rounds, settings.screen_gate_rounds)
    score = None
    if not rec.failed_stage:
        view.update(stage=f"gate {'+'.join(gate_stages[0])} + bench {bench_shapes}")
        t0 = time.monotonic()
        g, b = ev.screen(path, gate_stages[0], screen_rounds, settings.seed + 1000 * rec.n, bench_shapes,
                         incumbent=st.incumbent)
        rec.stage_s["screen"] = round(time.monotonic() - t0, 3)
        if g.skipped:  # timed first and too slow to be promoted: no correctness verdict needed
            rec.gate = GateRecord(skipped=g.skipped)
            m.screen_refused, m.screen_slow_shape = g.skipped, g.slow_shape
        else:
            _gate_into(rec, m, g, gate_stages[0])
        if not rec.failed_stage and b is not None:
            score = _bench_into(rec, m, b, run, st)
    vs_inc = rec.bench.vs_incumbent if score is not None else None
    # only promising candidates earn the expensive stages; nothing else may touch the GPU meanwhile
    if m.timing == "gpu" and vs_inc is not None and vs_inc - 1 > settings.rules.remeasure_above \
            and not m.screen_refused:
        view.update(stage="compare (ABBA)")
        t0 = time.monotonic()
        c = ev.compare(st.incumbent, path, bench_shapes)
        rec.stage_s["compare"] = round(time.monotonic() - t0, 3)
        rec.compare = CompareRecord(speedups=c.speedups, geomean=c.geomean, noise=c.noise, timing=c.timing,
                                    error=c.error)
        if c.timing == "gpu" and not c.error:
            m.ratios, m.geomean, m.noise = c.speedups, c.geomean, c.noise
        elif c.error.startswith("check:"):  # its timed outputs or times failed the checker: the candidate's fault
            m.bench_error = f"ABBA re-measure rejected it: {c.error}"
        # the full-set gate (float64 references of long sequences: the dearest stage) only for a
        # candidate the comparison would promote; the decision itself still reads the real gate
        full = [s for stage in gate_stages[1:] for s in stage]
        assumed = {"gate_sets": m.gate_sets + full, "gate": {**{s: [True] for s in m.expected_shapes}, **m.gate}}
        if full and decide(m.model_copy(update=assumed), settings.rules).promote:
            t0 = time.monotonic()
            # the small sets again with every round the settings ask for (the screen ran fewer), then the rest
            again = [gate_stages[0]] if screen_rounds < rounds else []
            for i, sets in enumerate([*again, *gate_stages[1:]]):
                if rec.failed_stage:
                    break
                view.update(stage="gate " + "+".join(sets))
                _gate_into(rec, m, ev.gate(path, sets, rounds, settings.seed + 1000 * rec.n + 1 + i), sets)
            rec.stage_s["gate"] = round(time.monotonic() - t0, 3)
    elif m.timing == "gpu" and vs_inc is not None:
        m.screen_gain = vs_inc - 1
    rec.score = score
    rec.improved = score is not None and (st.best is None or score > st.best)
    rec.measurements = m.model_copy(deep=True)
    rec.decision = decide(m, settings.rules)
    return rec


def _gate_into(rec: Attempt, m: Measurements, g: GateRecord, sets: list[str]) -> None:
    m.gate.update(g.passed)
    m.gate_sets += sets
    rec.gate = g.model_copy(update={"sets": list(m.gate_sets), "passed": dict(m.gate)})  # every set so far
    if g.error or not g.passed or not all(all(r) for r in g.passed.values()):
        rec.failed_stage, m.gate_error = "gate", g.error or "a shape failed"


def _bench_into(rec: Attempt, m: Measurements, b, run: RunRecord, st: State) -> float | None:
    rec.bench = BenchRecord(times_us=b.times_us, timing=b.timing, error=b.error, roofline=b.roofline)
    m.timing = b.timing if b.timing in ("gpu", "interpreter") else "none"
    if b.error or not b.times_us:
        rec.failed_stage, m.bench_error = "bench", b.error or "no timings"
        return None
    paired = speedup(b.incumbent_us, b.times_us) if b.incumbent_us else None
    rec.bench.host_us = b.host_us or None
    if paired is not None:  # the incumbent timed beside it: chain that ratio to the incumbent's standing
        score, vs_inc = st.incumbent_score * paired, paired
        rec.bench.incumbent_us = b.incumbent_us
    else:  # against the figures of the setup (CPU, or an evaluator without paired timing)
        score = speedup(run.baseline.baseline_us, b.times_us)
        vs_inc = speedup(st.incumbent_times, b.times_us)
    rec.bench.vs_baseline, rec.bench.vs_incumbent, rec.bench.paired = score, vs_inc, paired is not None
    return score


def measure_copy(prep: Prepared, settings: OptimizeSettings, op, ev, st: State, run: RunRecord,
                 view: View) -> Attempt:
    """measure() on a copy of ``prep`` (measure fills the record it is given): what the pools call."""
    return measure(copy.deepcopy(prep), settings, op, ev, st, run, view)
