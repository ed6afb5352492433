"""What the next round needs, rebuilt from run.json and attempts.jsonl alone (so a resumed run
continues exactly where its log ends), and which shape sets each stage uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aka.contract.shapes import ShapeSet, gated_stages
from aka.evaluate.parent.outcomes import speedup
from aka.records import RunRecord
from aka.run.store import RunStore
from aka.run.supervisor import BudgetUsed
from aka.settings import OptimizeSettings


@dataclass
class State:
    """What the next round needs; a pure function of run.json and the attempts log."""

    used: BudgetUsed
    best: float | None  # best geomean speedup over the baseline (bench screen)
    incumbent: Path
    incumbent_label: str
    incumbent_times: dict[str, float]
    incumbent_score: float = 1.0  # the incumbent's geomean speedup over the baseline
    incumbent_shapes: dict[str, float] = field(default_factory=dict)  # ... and per shape
    seen: dict[str, int] = field(default_factory=dict)  # code hash -> attempt that measured it


def shape_plan(settings: OptimizeSettings) -> tuple[list[list[str]], str, int]:
    """Gate stages, bench shapes and gate rounds: the full set only off the interpreter."""
    if settings.interpreter:
        return [list(settings.cpu_gate_sets)], settings.cpu_bench_shapes, settings.cpu_gate_rounds
    return [[s.value for s in stage] for stage in gated_stages(gpu=True)], ShapeSet.FULL.value, settings.gate_rounds


def first_state(run: RunRecord) -> State:
    """The state the first candidates are planned from while the set-up still times the incumbent
    (aka.run.setup's head start): no attempt yet, no times; the standing where it is known untimed."""
    inc = run.incumbent
    start = inc.standing or {"geomean": 1.0, "shapes": {}}
    st = State(BudgetUsed(), None, Path(inc.path), inc.label, {}, start["geomean"], dict(start["shapes"]))
    st.seen[inc.hash] = -1
    return st


def rebuild(store: RunStore, run: RunRecord) -> State:
    base, inc = run.baseline.baseline_us, run.baseline.incumbent_us
    # runs recorded before the standing was: the set-up's timings
    start = run.incumbent.standing or {"geomean": speedup(base, inc) or 1.0,
                                       "shapes": {s: b / inc[s] for s, b in base.items() if inc.get(s)}}
    st = State(BudgetUsed(elapsed_s=run.setup_s), None, Path(run.incumbent.path),
               run.incumbent.label, dict(inc), start["geomean"], dict(start["shapes"]))
    st.seen[run.incumbent.hash] = -1
    for rec in store.attempts():
        st.used.candidates += 1
        st.used.elapsed_s += rec.duration_s
        st.used.tokens += rec.tokens
        st.used.since_improvement = 0 if rec.improved else st.used.since_improvement + 1
        if rec.score is not None:
            st.best = rec.score if st.best is None else max(st.best, rec.score)
        if rec.code_hash:
            st.seen.setdefault(rec.code_hash, rec.n)
        if rec.promoted:
            st.incumbent = store.path / "candidates" / f"{rec.n}.py"
            st.incumbent_label = f"candidate {rec.n}"
            st.incumbent_times = dict(rec.times_us)
            # the standing over the baseline (aka.run.standing): the start's chained through each
            # promotion's ABBA re-measure (the screen's times drift by several % between workers)
            m = rec.measurements
            st.incumbent_score *= m.geomean
            st.incumbent_shapes = {s: st.incumbent_shapes.get(s, 1.0) * r for s, r in m.ratios.items()}
    return st
