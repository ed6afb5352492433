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
    base = op.path("baseline")
    beside = None if incumbent == base else base
    both = f"the baseline ({base.name})" + (f" and the incumbent ({incumbent.name}) side by side" if beside else "")
    say(f"time {both} on the {bench_shapes} shapes, ranked on {evaluator.rank} timing")
    # one worker, the same inputs for both, interleaved shape by shape: one process and one float64
    # reference per input for the pair (each alone took 12-13 s of gdn_prefill's 75 s set-up, H200)
    b = evaluator.bench(incumbent, bench_shapes, beside=beside,
                        names=("incumbent", "baseline") if beside else ("baseline", "incumbent"))
    for label, times in (("incumbent", b.times_us), ("baseline", b.incumbent_us if beside else b.times_us)):
        # every shape, as when each was timed alone: bench_outcome names the first one's failures only
        missing = sorted(set(b.times_us) - set(times))
        if b.error or not times or missing:
            why = b.error or (f"no time on {', '.join(missing)}" if missing else "no times")
            raise SetupError(f"{op.name}: timing the {label} failed: {why}")
    figures["timing"], figures["incumbent_roofline"] = b.timing, b.roofline
    figures["incumbent_us"], figures["incumbent_host_us"] = b.times_us, b.host_us  # host: reported, never ranked
    figures["baseline_us"], figures["baseline_host_us"] = ((b.incumbent_us, b.incumbent_host_us) if beside
                                                           else (b.times_us, b.host_us))
    for label in ("baseline", "incumbent") if beside else ("baseline",):
        say(f"{label}: " + ", ".join(f"{s} {us:,.1f}" for s, us in figures[f"{label}_us"].items()) + " µs")
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
