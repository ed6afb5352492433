"""A run's set-up: the run directory and the baseline figures every decision needs, paid once."""

from __future__ import annotations

import time
from pathlib import Path

from aka.errors import AkaError
from aka.evaluate.evaluator import Evaluator
from aka.evaluate.outcomes import code_hash
from aka.knowledge.lessons import top_lessons
from aka.run import gitops
from aka.run.standing import start_standing
from aka.run.state import shape_plan
from aka.run.store import RunStore
from aka.settings import OptimizeSettings


class SetupError(AkaError):
    """The baseline could not be measured, so no candidate can be judged."""


def prepare_run(runs_root: Path, settings: OptimizeSettings, op, evaluator: Evaluator) -> RunStore:
    """Create the run directory and pay once for the baseline figures every decision needs."""
    t0 = time.monotonic()
    # on every device: an edited promoted.py would otherwise be measured as the incumbent (and on a
    # GPU refused only at the first promotion, after the search)
    if settings.commit:
        gitops.check_clean(op.root, op.name)
    device = evaluator.device()
    _, bench_shapes, _ = shape_plan(settings)
    incumbent = op.default_kernel()
    # the timing candidates are ranked on (the contract's rank_timing, eager in the interpreter)
    figures: dict = {"rank_timing": evaluator.rank}
    compiled = {path: evaluator.compile(path) for path in {op.path("baseline"), incumbent}}  # into Triton's cache
    # the incumbent's registers/spills steer the first plans (on CPU: an "unavailable" record)
    figures["incumbent_compile"] = compiled[incumbent].detail.get("compile_stats")
    for label, path in {"baseline": op.path("baseline"), "incumbent": incumbent}.items():
        if label == "incumbent" and path == op.path("baseline"):
            figures["incumbent_us"] = figures["baseline_us"]
            continue
        b = evaluator.bench(path, bench_shapes)
        if b.error or not b.times_us:
            raise SetupError(f"{op.name}: timing the {label} ({path.name}) failed: {b.error or 'no times'}")
        figures[f"{label}_us"], figures["timing"] = b.times_us, b.timing
        figures["incumbent_roofline"] = b.roofline  # the last one timed is the incumbent
    if settings.interpreter:  # external libraries against interpreter timings would mean nothing
        figures["competitors_us"], figures["competitors_notes"] = {}, ["competitors not timed: CPU interpreter"]
    elif not settings.competitors:
        figures["competitors_us"], figures["competitors_notes"] = {}, ["competitors not timed: --no-competitors"]
    else:  # once, for the report: where the incumbent stands against fla / sdpa
        figures["competitors_us"], figures["competitors_notes"] = evaluator.competitors(bench_shapes)
    gate_sets, _, rounds = shape_plan(settings)
    g = evaluator.gate(incumbent, gate_sets[0], rounds, settings.seed)  # a failing incumbent explains everything
    figures["incumbent_gate"] = {"sets": gate_sets[0], "ok": bool(g.passed) and not g.error, "error": g.error}
    source = incumbent.read_text()
    lessons = top_lessons(runs_root / op.name)  # earlier runs only: read before this run's folder exists
    store = RunStore.create(runs_root, op.name, {})
    copy = store.write_candidate("incumbent", source)  # a stable copy: another run may replace promoted.py
    run = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "status": "running", "settings": settings.model_dump(),
        "device": device,
        "baseline": {**figures, "shapes": bench_shapes, "hash": code_hash(op.path("baseline").read_text())},
        "incumbent": {"label": incumbent.stem, "path": str(copy), "hash": code_hash(source),
                      "standing": start_standing(op, incumbent, figures)},
        "promoted_at_start": gitops.read_promoted_meta(op.root, op.name).get("code_hash"),
        "lessons": lessons,
        "setup_s": round(time.monotonic() - t0, 3),
    }
    store.update_run(**run)
    return store
