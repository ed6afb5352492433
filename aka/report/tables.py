"""`aka report`: the data behind a run's report, as typed rows (pure functions of a run directory).

Figures (aka.report.plots) and the page (aka.report.html) only draw what these functions return,
so the tests check the numbers behind each figure without looking at pixels.

Latencies are geomeans over the run's bench shapes (run.json baseline.shapes). An attempt gets a
point on the trajectory only when it was timed on every one of those shapes: a geomean over fewer
shapes is not comparable with the baseline's. External competitors appear when run.json carries
``baseline.competitors_us`` ({name: {shape: µs}}); a run without them says so in the figure.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aka.records import Attempt, read_attempts, read_run_record


def geomean_us(times: dict[str, float], shapes: list[str]) -> float | None:
    """Geomean of times over exactly `shapes`; None when one is missing or not positive."""
    if not shapes or any((times.get(s) or 0) <= 0 for s in shapes):
        return None
    return math.exp(sum(math.log(times[s]) for s in shapes) / len(shapes))


@dataclass(frozen=True)
class AttemptRow:
    n: int
    verdict: str  # promoted | rejected | not promoted
    stage: str  # where it stopped: check, compile, gate, bench, duplicate, or done
    reason: str
    plan: str
    geomean_us: float | None  # None when not timed on every bench shape
    best_us: float | None  # best geomean of any timed attempt so far, this one included
    incumbent_us: float | None  # geomean of the kernel in place after this attempt's decision
    vs_baseline: float | None
    tokens: int
    cum_tokens: int


@dataclass(frozen=True)
class Bar:
    label: str
    geomean_us: float
    kind: str  # baseline | incumbent | candidate | competitor


@dataclass(frozen=True)
class ShapeSpeedup:
    shape: str
    baseline_us: float
    kernel_us: float

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.kernel_us


@dataclass(frozen=True)
class KernelDiff:
    n: int
    replaced: str  # label of the incumbent it replaced
    text: str  # unified diff


@dataclass
class RunReport:
    run_id: str
    op: str
    device: str
    timing: str  # gpu | interpreter | ...
    status: str
    stop_reason: str
    shapes: list[str]
    baseline_us: dict[str, float]
    baseline_geomean: float | None
    attempts: list[AttemptRow]
    best_competitor: Bar | None
    bars: list[Bar]
    final_label: str  # what the per-shape speedup figure shows; "" when nothing was timed
    speedups: list[ShapeSpeedup]
    diffs: list[KernelDiff]
    llm_used: bool
    notes: list[str] = field(default_factory=list)
    start_label: str = "baseline"  # the kernel the run started from (still in place when nothing was promoted)
    start_us: float | None = None  # its geomean latency, timed at the run's set-up

    @property
    def interpreter(self) -> bool:
        return self.timing != "gpu"

    @property
    def timing_label(self) -> str:
        return "GPU timings" if not self.interpreter else "interpreter timings, not representative"


def _plan_text(rec: Attempt) -> str:
    plan = rec.plan
    if plan is None:
        return ""
    head = f"{plan.pattern}: " if plan.pattern else ""
    return head + (plan.hypothesis or plan.structural_change or "")


def attempt_rows(attempts: list[Attempt], shapes: list[str], start_us: float | None = None) -> list[AttemptRow]:
    """One row per attempt; start_us is the geomean of the incumbent the run started from."""
    rows, best, cum, inc = [], None, 0, start_us
    for rec in attempts:
        g = geomean_us(rec.times_us, shapes)
        if g is not None:
            best = g if best is None else min(best, g)
        tokens = rec.tokens
        cum += tokens
        d = rec.decision
        if rec.promoted and g is not None:
            inc = g
        rows.append(AttemptRow(
            n=rec.n, verdict=d.verdict if d else "?", stage=rec.failed_stage or "done",
            reason=d.reason if d else "", plan=_plan_text(rec), geomean_us=g, best_us=best, incumbent_us=inc,
            vs_baseline=rec.score, tokens=tokens, cum_tokens=cum))
    return rows


def competitor_bars(competitors: dict[str, dict[str, float]], shapes: list[str]) -> list[Bar]:
    bars = []
    for name, times in sorted(competitors.items()):
        g = geomean_us(times, shapes)
        if g is not None:
            bars.append(Bar(name, g, "competitor"))
    return bars


def final_kernel(attempts: list[Attempt], shapes: list[str]) -> tuple[str, Attempt | None]:
    """The run's last promoted attempt, else its best fully timed candidate (labelled as not promoted)."""
    promoted = [a for a in attempts if a.promoted]
    if promoted:
        return f"candidate {promoted[-1].n} (promoted)", promoted[-1]
    timed = [a for a in attempts if geomean_us(a.times_us, shapes)]
    if not timed:
        return "", None
    best = min(timed, key=lambda a: geomean_us(a.times_us, shapes))
    return f"best candidate {best.n} (not promoted)", best


def kernel_diffs(run_dir: Path, attempts: list[Attempt], start_label: str) -> list[KernelDiff]:
    """Each promotion of the run against the incumbent it replaced (the start copy or the previous one)."""
    out = []
    prev_path, prev_label = run_dir / "candidates" / "incumbent.py", start_label
    for rec in attempts:
        if not rec.promoted:
            continue
        path = run_dir / "candidates" / f"{rec.n}.py"
        old = prev_path.read_text().splitlines(keepends=True) if prev_path.is_file() else []
        new = path.read_text().splitlines(keepends=True) if path.is_file() else []
        text = "".join(difflib.unified_diff(old, new, fromfile=prev_label, tofile=f"candidate {rec.n}"))
        out.append(KernelDiff(rec.n, prev_label, text or "(identical sources)\n"))
        prev_path, prev_label = path, f"candidate {rec.n}"
    return out


def load_run_report(run_dir: Path) -> RunReport:
    """Everything the run report shows, from run.json, attempts.jsonl and candidates/."""
    run = read_run_record(run_dir)
    attempts = read_attempts(run_dir)
    base = run.baseline
    base_us = base.baseline_us
    shapes = list(base_us)
    start_label = run.incumbent.label
    base_g = geomean_us(base_us, shapes)
    inc_g = geomean_us(base.incumbent_us, shapes)
    rows = attempt_rows(attempts, shapes, inc_g)
    comps = competitor_bars(base.competitors_us, shapes)
    notes = []
    if not comps:
        notes.append("no external competitor was timed in this run")
    bars = [Bar("baseline", base_g, "baseline")] if base_g else []
    if inc_g and start_label != "baseline":
        bars.append(Bar(f"{start_label} (at start)", inc_g, "incumbent"))
    label, final = final_kernel(attempts, shapes)
    speedups: list[ShapeSpeedup] = []
    if final is not None:
        times = final.times_us
        bars.append(Bar(label, geomean_us(times, shapes), "candidate"))
        speedups = [ShapeSpeedup(s, base_us[s], times[s]) for s in shapes]
    bars += comps
    summary = run.summary
    untimed = sum(r.geomean_us is None for r in rows)
    if untimed:
        notes.append(f"{untimed} of {len(rows)} attempts were not timed on every shape (stopped before the bench)")
    return RunReport(
        run_id=run.run_id or run_dir.name, op=run.op or run_dir.parent.name,
        device=run.device.name or "?", timing=base.timing or "?",
        status=run.status or "?", stop_reason=str(summary.get("stop_reason") or ""), shapes=shapes,
        baseline_us=base_us, baseline_geomean=base_g, attempts=rows,
        best_competitor=min(comps, key=lambda b: b.geomean_us) if comps else None, bars=bars,
        final_label=label, speedups=speedups, diffs=kernel_diffs(run_dir, attempts, start_label),
        llm_used=any(r.tokens for r in rows), notes=notes, start_label=start_label, start_us=inc_g)


@dataclass(frozen=True)
class PromotionRow:
    rev: str
    date: str
    run_id: str
    attempt: Any
    vs_previous: float | None
    vs_baseline: float | None
    device: str
    subject: str
    baseline_hash: str | None = None  # promoted.json's: the baseline its "vs baseline" is measured against


def promotion_rows(root: Path, op: str) -> tuple[list[PromotionRow], str]:
    """The op's promotions from git, oldest first; a note instead when there is no history to read."""
    from aka.run import gitops

    try:
        entries = gitops.history(root, op)
    except gitops.GitError as exc:
        return [], str(exc)
    rows = rows_from(entries[::-1])
    return rows, "" if rows else f"{op} has no promoted kernel yet (no commit touches kernels/{op}/promoted.py)"


def rows_from(entries: list[Any]) -> list[PromotionRow]:
    """gitops.Promotion entries, oldest first, as rows with their figures (aka.run.standing: one definition)."""
    from aka.run.standing import history_figures

    return [PromotionRow(p.rev, p.date, p.meta.run_id or "-", "-" if p.meta.attempt is None else p.meta.attempt,
                         vs_prev, vs_base, p.meta.device or "?", p.subject, p.meta.baseline_hash)
            for p, (vs_prev, vs_base) in zip(entries, history_figures(entries))]
