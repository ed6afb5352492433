"""A kernel's standing: its geomean (and per-shape) speedup over the op's baseline.

One definition behind promoted.json, the promotion commit, `aka history` and the history report:
the standing of a promoted kernel is the standing of the kernel it replaced times its ABBA
speedup over that kernel ("vs previous"); the baseline stands at 1.0. Single timings taken in
different workers drift by several % (docs/perf/device-2026-11-29c.md), so a figure chained from
a screen's times would disagree with the re-measured "vs previous" it sits beside.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from aka.evaluate.parent.outcomes import code_hash, speedup


def recorded_standing(op, incumbent: Path, rank_timing: str) -> dict[str, Any] | None:
    """The standing of the kernel a run starts from where it is known without timing it: the baseline
    (1.0 everywhere, shapes filled in by start_standing), or what promoted.json recorded when the record
    is of this very source (and of this baseline, where the record names it) in this timing. None else."""
    from aka.run import gitops

    if incumbent == op.path("baseline"):
        return {"geomean": 1.0, "shapes": {}, "from": "baseline"}
    meta = gitops.read_promoted_meta(op.root, op.name)
    if meta is None:
        return None
    same_base = meta.baseline_hash in (None, code_hash(op.path("baseline").read_text()))
    # a record made in another timing (eager before the op ranked on graph replay) says nothing here
    same_timing = meta.timing == rank_timing
    if (meta.code_hash == code_hash(incumbent.read_text()) and same_base and same_timing
            and meta.geomean_vs_baseline and meta.speedup_vs_baseline):
        return {"geomean": meta.geomean_vs_baseline, "shapes": dict(meta.speedup_vs_baseline),
                "from": "promoted.json"}
    return None


def start_standing(op, incumbent: Path, figures: dict[str, Any]) -> dict[str, Any]:
    """The standing of the kernel a run starts from: recorded_standing, else (a promoted.py without its
    record, a hand-written one) the set-up's own timings, said so."""
    base = figures["baseline_us"]
    known = recorded_standing(op, incumbent, figures.get("rank_timing", "eager"))
    if known is not None:
        return {**known, "shapes": {s: 1.0 for s in base}} if known["from"] == "baseline" else known
    inc = figures["incumbent_us"]
    return {"geomean": speedup(base, inc) or 1.0, "shapes": {s: b / inc[s] for s, b in base.items() if inc.get(s)},
            "from": "set-up timings"}


def chained(previous: float | None, vs_previous: float | None) -> float | None:
    return None if previous is None or vs_previous is None else previous * vs_previous


def history_figures(entries: list[Any]) -> list[tuple[float | None, float | None]]:
    """(vs previous, vs baseline) per promotion commit, entries oldest first (gitops.Promotion).

    A commit that removes the promoted kernel puts the baseline back (1.0). A commit that brings
    back a kernel already seen (a rollback) measured nothing: no "vs previous", its old standing.
    Where the chain is broken (a promoted.py committed without its record) the record's own
    "vs baseline" stands in."""
    out: list[tuple[float | None, float | None]] = []
    seen: dict[str, float | None] = {}
    current: float | None = 1.0
    for p in entries:
        meta = p.meta
        if not p.present:
            current = 1.0
            out.append((None, None))
            continue
        h = meta.code_hash
        if h and h in seen:
            current = seen[h]
            out.append((None, current))
            continue
        vs_prev = meta.geomean_vs_previous
        current = chained(current, vs_prev) or meta.geomean_vs_baseline
        if current is not None and not math.isfinite(current):
            current = None
        if h:
            seen[h] = current
        out.append((vs_prev, current))
    return out
