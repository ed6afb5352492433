"""A run's set-up: the run directory and the baseline figures every decision needs, paid once.

What only the report and later plans need (competitors, the incumbent's profile) is read from the
cache or deferred until after the candidates (aka.run.deferred): on a fresh H200 (2026-12-03) it held
the first candidate up for minutes."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aka.errors import AkaError
from aka.evaluate.parent.evaluator import Evaluator, map_workers
from aka.evaluate.parent.outcomes import code_hash
from aka.knowledge.lessons import top_lessons
from aka.run import gitops
from aka.run.deferred import DEFERRED, competitors_key, read_competitors
from aka.run.standing import recorded_standing, start_standing
from aka.run.state import shape_plan
from aka.run.store import RunStore, cache_dir
from aka.settings import OptimizeSettings


class SetupError(AkaError):
    """The baseline could not be measured, so no candidate can be judged."""


def _quiet(line: str) -> None:
    pass


def prepare_run(runs_root: Path, settings: OptimizeSettings, op, evaluator: Evaluator,
                say: Callable[[str], None] = _quiet,
                head_start: Callable[[RunStore], None] | None = None, t0: float | None = None) -> RunStore:
    """Create the run directory and pay once for the baseline figures every decision needs; `say`
    gets one line per step (the CLI prints them, flushed, also when stdout is a file).

    The incumbent compiles first, alone; then `head_start(store)` may start the first candidates
    (planned, written, checked, compiled on the idle cores) while the incumbent is gated, the
    baseline compiled and both timed. Until the figures are in, run.json says "setting up"; if the
    set-up fails or is interrupted, the run directory is removed (nothing to resume). `t0`: the
    command's start (time.monotonic()), so setup_s holds what the user waited before it (imports, the
    backend's probe, the workers started ahead: ~5 s on the H200); default now."""
    t0 = time.monotonic() if t0 is None else t0
    # on every device: an edited promoted.py would otherwise be measured as the incumbent (and on a
    # GPU refused only at the first promotion, after the search)
    if settings.commit:
        gitops.check_clean(op.root, op.name)
    device = evaluator.device()
    gate_sets, bench_shapes, rounds = shape_plan(settings)
    incumbent, base = op.default_kernel(), op.path("baseline")
    # the timing candidates are ranked on (the contract's rank_timing, eager in the interpreter)
    figures: dict = {"rank_timing": evaluator.rank}
    steps: dict[str, float] = {}  # seconds per set-up step, in run.json: where a slow start went
    # as the screen gates candidates (a failing incumbent explains why they fail)
    rounds = rounds if settings.interpreter else min(rounds, settings.screen_gate_rounds)
    if drift := gitops.config_promotion_drift(op.root, op.name):  # the timing below re-measures them
        say(f"promoted.json: {drift}; timed against the baseline below")
    say(f"compile {incumbent.name} (Triton compiles each specialisation once; cached after)")
    # alone, on every core compiles may take: its gate and the first candidates' compiles need its kernels. The
    # gate used to run beside the compiles and compiled in its own process what the compile call's forks were
    # compiling too (gdn_prefill: 76 s for compiles and gate together, H200 2026-12-04)
    t = time.monotonic()
    compiled = evaluator.compile(incumbent)
    steps["compile_incumbent"] = round(time.monotonic() - t, 3)
    figures["incumbent_compile"] = compiled.detail.get("compile_stats")
    source = incumbent.read_text()
    lessons = top_lessons(runs_root / op.name)  # earlier runs only: read before this run's folder exists
    store = RunStore.create(runs_root, op.name, {})
    try:
        copy = store.write_candidate("incumbent", source)  # a stable copy: another run may replace promoted.py
        run = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "status": "setting up",
            "settings": settings.model_dump(), "device": device,
            "baseline": {**figures, "shapes": bench_shapes, "hash": code_hash(base.read_text())},
            "incumbent": {"label": incumbent.stem, "path": str(copy), "hash": code_hash(source),
                          "standing": recorded_standing(op, incumbent, evaluator.rank)},
            "promoted_at_start": getattr(gitops.read_promoted_meta(op.root, op.name), "code_hash", None),
            "lessons": lessons,
        }
        store.update_run(**run)
        if head_start is not None and compiled.ok:
            head_start(store)
        figures.update(_measure(op, evaluator, say, steps, incumbent, gate_sets[0], rounds, bench_shapes,
                                settings.seed))
        figures.update(_competitors(runs_root, settings, op, device, bench_shapes, evaluator.rank))
        run["baseline"].update(figures)
        run["incumbent"]["standing"] = start_standing(op, incumbent, figures)
        store.update_run(status="running", baseline=run["baseline"], incumbent=run["incumbent"], setup_steps=steps,
                         setup_s=round(time.monotonic() - t0, 3))
    except BaseException:
        store.close()
        shutil.rmtree(store.path, ignore_errors=True)  # figures missing: nothing to resume
        raise
    return store


def _measure(op, evaluator: Evaluator, say, steps: dict[str, float], incumbent: Path, gate_set: list[str],
             rounds: int, bench_shapes: str, seed: int) -> dict[str, Any]:
    """The incumbent's gate beside the baseline's compile, then both timed side by side: their figures;
    seconds per step into `steps`."""
    base = op.path("baseline")
    beside = None if incumbent == base else base
    figures: dict[str, Any] = {}
    say(f"gate the incumbent on {'+'.join(gate_set)}, {rounds} rounds"
        + (f"; compile {base.name} for the timed shapes" if beside else ""))

    def timed(name: str, job: Callable[[], Any]) -> Any:
        t = time.monotonic()
        try:
            return job()
        finally:
            steps[name] = round(time.monotonic() - t, 3)

    jobs = [("gate", lambda: evaluator.gate(incumbent, gate_set, rounds, seed))]
    if beside:  # only what its timing launches, and no statistics: the baseline is never gated or planned from here
        jobs.append(("compile_baseline", lambda: evaluator.compile(base, [c.id for c in op.cases(bench_shapes)],
                                                                   stats=False)))
    g, *_ = map_workers(lambda job: timed(*job), jobs)
    figures["incumbent_gate"] = {"sets": gate_set, "ok": bool(g.passed) and not g.error, "error": g.error}
    say(f"incumbent gate: {'passed' if figures['incumbent_gate']['ok'] else 'FAILED: ' + g.error[:200]}")
    both = f"the baseline ({base.name})" + (f" and the incumbent ({incumbent.name}) side by side" if beside else "")
    say(f"time {both} on the {bench_shapes} shapes, ranked on {evaluator.rank} timing")
    # one worker, the same inputs for both, interleaved shape by shape: one process and one float64
    # reference per input for the pair (each alone took 12-13 s of gdn_prefill's 75 s set-up, H200)
    t = time.monotonic()
    b = evaluator.bench(incumbent, bench_shapes, beside=beside,
                        names=("incumbent", "baseline") if beside else ("baseline", "incumbent"))
    steps["timing"] = round(time.monotonic() - t, 3)
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
    return figures


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
