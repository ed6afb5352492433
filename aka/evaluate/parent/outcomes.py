"""What a measuring stage returns to the loop, as typed records, and the parsing of the workers'
payloads into them: one reading of a gate report, a bench run and an ABBA comparison."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from aka.evaluate.host.bench import geomean
from aka.evaluate.wire import BenchCell, BenchValue, Comparison, GateReport, OutputCheck
from aka.records import GateRecord


@dataclass
class StageOutcome:
    ok: bool
    error: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchOutcome:
    times_us: dict[str, float]  # shape id -> median microseconds
    timing: str  # "gpu" or "interpreter"
    error: str = ""
    roofline: dict[str, float] = field(default_factory=dict)  # shape id -> fraction of the roofline (GPU)
    # the incumbent timed interleaved with the candidate in the same worker (GPU screen): a paired
    # ratio, free of the drift between the setup's baseline timing and this one
    incumbent_us: dict[str, float] = field(default_factory=dict)
    # the host's cost per call (eager median minus graph median), of the candidate and of the paired
    # incumbent, where the op ranks on graph replay: reported beside the ranking, never part of it
    host_us: dict[str, float] = field(default_factory=dict)
    incumbent_host_us: dict[str, float] = field(default_factory=dict)


@dataclass
class CompareOutcome:
    speedups: dict[str, float]  # shape id -> incumbent time / candidate time
    geomean: float | None
    noise: float | None
    timing: str
    error: str = ""


def code_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def speedup(reference: dict[str, float], candidate: dict[str, float]) -> float | None:
    """Geomean over common shapes of reference time / candidate time."""
    common = [s for s in reference if s in candidate and candidate[s] > 0]
    return geomean([reference[s] / candidate[s] for s in common]) if common else None


def host_cost(cell: BenchCell) -> float | None:
    """The host's cost per call of one bench cell: eager minus CUDA-graph replay (medians, µs), or None
    without both. The eager side is the interval closed on the caller's stream right after the call
    (Timing.stream_us): it holds the host's launches and the GPU's idle time between them, and not the
    timer's device-wide sync, whose round trip (12-20 µs on an H100's host) is in every eager sample of
    every implementation alike; a replay's interval is the GPU's work only (GraphTimer). Work left on an
    unjoined side stream is outside that interval (the eager median, and the gate, still hold it); the
    figure is reported, never ranked. Timings written before stream_us existed: the eager median."""
    g, eager = cell.median("graph"), cell.timed("eager")
    e = None if eager is None else eager.median_us if eager.stream_us is None else eager.stream_us
    return round(e - g, 3) if e and g else None


def bench_outcome(value: BenchValue, rank: str = "eager", name: str = "candidate",
                  beside: str = "incumbent") -> BenchOutcome:
    """The candidate's (and the paired incumbent's; other names with name and beside) medians in the
    timing the op ranks on (the
    contract's rank_timing: "eager", or "graph" for CUDA-graph replay). Under "graph" a shape the
    candidate could not be captured on is an error that names why (a server could not replay it)."""
    gpu = value.kind == "gpu"
    rank = rank if gpu else "eager"  # the interpreter has no graphs: its timings decide nothing anyway
    times, errors, roofline, inc, host, inc_host = {}, [], {}, {}, {}, {}
    for row in value.rows:
        ref = row.results.get(beside) or BenchCell()
        if inc_median := ref.median(rank):
            inc[row.shape] = inc_median
        res = row.results[name]
        if gpu and (h := host_cost(res)) is not None:
            host[row.shape] = h
        if gpu and (h := host_cost(ref)) is not None:
            inc_host[row.shape] = h
        median = res.median(rank)
        if median:
            times[row.shape] = median
            if rank == "eager" and res.roofline_frac is not None:
                roofline[row.shape] = res.roofline_frac
            elif rank != "eager" and row.floor_us:
                roofline[row.shape] = row.floor_us / median
        elif res.eager:  # timed eagerly, but not in the ranked timing
            errors.append(f"{row.shape}: no {rank} timing ({_note(res, rank) or 'not measured'})")
        else:
            errors.append(f"{row.shape}: {res.error or res.skipped}")
    return BenchOutcome(times, "gpu" if gpu else "interpreter", "; ".join(errors), roofline, inc, host, inc_host)


def _note(cell: BenchCell, timing: str) -> str:
    """Why a cell has no timing of that kind (graph replays only say why)."""
    return cell.graph_note if timing == "graph" else ""


def eager_medians(value: BenchValue, names: list[str] | None = None, timing: str = "eager"
                  ) -> tuple[dict[str, dict[str, float]], list[tuple[str, str, BenchCell]]]:
    """A bench_worker result read as {implementation: {shape id: eager median µs}}, plus (name, shape,
    cell) for every cell without an eager time (skipped or failed). With ``names``, those implementations
    in that order (each one in every row); else every implementation a row holds. ``timing="graph"``
    reads the CUDA-graph replay medians instead (an op that ranks on them); a cell without one is
    untimed, with a `graph_note` saying why."""
    times: dict[str, dict[str, float]] = {n: {} for n in names or ()}
    untimed: list[tuple[str, str, BenchCell]] = []
    for row in value.rows:
        cells = [(n, row.results[n]) for n in names] if names is not None else row.results.items()
        for name, cell in cells:
            if median := cell.median(timing):
                times.setdefault(name, {})[row.shape] = median
            elif cell.eager:
                why = _note(cell, timing) or "not measured"
                untimed.append((name, row.shape, cell.model_copy(update={"error": f"no {timing} timing: {why}"})))
            else:
                untimed.append((name, row.shape, cell))
    return times, untimed


def compare_outcome(cmp: Comparison) -> CompareOutcome:
    """aka.evaluate.host.compare ratios are time_cand / time_inc; the Supervisor reads speedups (inverse)."""
    speedups = {s.shape: 1.0 / s.ratio for s in cmp.shapes}
    gm = 1.0 / cmp.geomean
    noise = (cmp.ci_high - cmp.ci_low) / 2 / cmp.geomean
    timing = "gpu" if cmp.kind.startswith("gpu") else "interpreter"
    return CompareOutcome(speedups, gm, noise, timing)


def gate_record(report: GateReport) -> GateRecord:
    """What the loop keeps of the checker's report: per shape, per round pass/fail, the verdict and the
    worst errors; the one type of a gate verdict from here to the attempt log and promoted.json."""
    passed: dict[str, list[bool]] = {}
    for shape in report.results:
        rounds = [r.ok for r in shape.rounds]
        passed[shape.id] = rounds if rounds and shape.passed == all(rounds) else [shape.passed]
    error = "" if report.passed else (report.reason or report.summary or "gate failed")
    if report.passed and not passed:
        error = "gate passed no shapes"
    # the worker's own report has no duration (the parent times the process): sum the rounds
    seconds = report.duration_s or sum(r.seconds for s in report.results for r in s.rounds)
    return GateRecord(passed=passed, error=error[:500], summary=report.summary, device=report.device,
                      rounds=report.n_rounds, seconds=round(seconds, 3), errors=gate_errors(report))


def gate_errors(report: GateReport) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per shape and output, the worst round's rel L2 against float64 beside the plain same-precision
    implementation's: the figures an engineer reads before trusting a promoted kernel."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for shape in report.results:
        worst: dict[str, tuple[tuple[bool, float], OutputCheck]] = {}
        for r in shape.rounds:
            for o in r.outputs:
                key = (not o.ok, o.rel_l2 if o.rel_l2 is not None else float("inf"))
                if o.name not in worst or key > worst[o.name][0]:
                    worst[o.name] = (key, o)
        if worst:
            out[shape.id] = {n: {"rel_l2": o.rel_l2, "plain_rel_l2": o.plain_rel_l2} for n, (_, o) in worst.items()}
    return out
