"""A run's set-up: the run directory and the baseline figures every decision needs, paid once.

What only the report and later plans need (competitors, the incumbent's profile) is read from the
cache or deferred until after the candidates (aka.run.deferred): on a fresh H200 (2026-12-03) it held
the first candidate up for minutes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from aka.errors import AkaError
from aka.evaluate.evaluator import Evaluator, map_workers
from aka.evaluate.outcomes import code_hash
from aka.knowledge.lessons import top_lessons
from aka.run import gitops
from aka.run.deferred import DEFERRED, cache_dir, competitors_key, read_competitors
from aka.run.standing import start_standing
from aka.run.state import shape_plan
from aka.run.store import RunStore
from aka.settings import OptimizeSettings


class SetupError(AkaError):
    """The baseline could not be measured, so no candidate can be judged."""


def _quiet(line: str) -> None:
    pass


def prepare_run(runs_root: Path, settings: OptimizeSettings, op, evaluator: Evaluator,
                say: Callable[[str], None] = _quiet) -> RunStore:
    """Create the run directory and pay once for the baseline figures every decision needs; `say`
    gets one line per step (the CLI prints them, flushed, also when stdout is a file)."""
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
    paths = list(dict.fromkeys([op.path("baseline"), incumbent]))
    gate_sets, _, rounds = shape_plan(settings)
    # as the screen gates candidates (a failing incumbent explains why they fail)
    rounds = rounds if settings.interpreter else min(rounds, settings.screen_gate_rounds)
    say(f"compile {' and '.join(p.name for p in paths)} (Triton compiles each specialisation once; cached after); "
        f"gate the incumbent on {'+'.join(gate_sets[0])}, {rounds} rounds")
    # side by side: on a cold Triton cache each is tens of seconds of CPU work on its own workers, and the
    # gate (no timing) beside them: 15 s of a 97 s gdn_prefill set-up after them on the H200 (2026-12-04)
    jobs = [lambda p=p: evaluator.compile(p) for p in paths]
    jobs.append(lambda: evaluator.gate(incumbent, gate_sets[0], rounds, settings.seed))
    *done, g = map_workers(lambda job: job(), jobs)
    compiled = dict(zip(paths, done))
    figures["incumbent_compile"] = compiled[incumbent].detail.get("compile_stats")
    figures["incumbent_gate"] = {"sets": gate_sets[0], "ok": bool(g.passed) and not g.error, "error": g.error}
    say(f"incumbent gate: {'passed' if figures['incumbent_gate']['ok'] else 'FAILED: ' + g.error[:200]}")
    for label, path in {"baseline": op.path("baseline"), "incumbent": incumbent}.items():
        if label == "incumbent" and path == op.path("baseline"):
            for k in ("us", "host_us"):
                figures[f"incumbent_{k}"] = figures[f"baseline_{k}"]
            continue
        say(f"time the {label} ({path.name}) on the {bench_shapes} shapes, ranked on {evaluator.rank} timing")
        b = evaluator.bench(path, bench_shapes)
        if b.error or not b.times_us:
            raise SetupError(f"{op.name}: timing the {label} ({path.name}) failed: {b.error or 'no times'}")
        figures[f"{label}_us"], figures["timing"] = b.times_us, b.timing
        figures[f"{label}_host_us"] = b.host_us  # eager minus graph: reported, never ranked
        figures["incumbent_roofline"] = b.roofline  # the last one timed is the incumbent
        say(f"{label}: " + ", ".join(f"{s} {us:,.1f}" for s, us in b.times_us.items()) + " µs")
    figures.update(_competitors(runs_root, settings, op, device, bench_shapes, evaluator.rank))
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


def _competitors(runs_root: Path, settings: OptimizeSettings, op, device: dict, shapes: str, timing: str) -> dict:
    """Where the incumbent stands against fla / sdpa, for the report: from the cache, or deferred."""
    if settings.interpreter:  # external libraries against interpreter timings would mean nothing
        return {"competitors_us": {}, "competitors_notes": ["competitors not timed: CPU interpreter"]}
    if not settings.competitors:
        return {"competitors_us": {}, "competitors_notes": ["competitors not timed: --no-competitors"]}
    if not op.spec.competitors:
        return {"competitors_us": {}, "competitors_notes": ["the contract names no competitors"]}
    key = competitors_key(op, device, shapes, timing)
    hit = read_competitors(cache_dir(runs_root, op.name), key)
    if hit is not None:
        return {"competitors_us": hit[0], "competitors_notes": hit[1]}
    return {"competitors_us": {}, "competitors_notes": [DEFERRED], "competitors_deferred": key}
