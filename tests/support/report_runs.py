"""Runs made by the real optimize loop (scripted backend, injected fake evaluator) for the report tests."""

from __future__ import annotations

from pathlib import Path

from fakes import FakeEvaluator, source  # noqa: E402

from aka.agent.llm.scripted import ScriptedBackend  # noqa: E402
from aka.contract.ops import get_op  # noqa: E402
from aka.run.loop import run_loop  # noqa: E402
from aka.run.setup import prepare_run  # noqa: E402
from aka.settings import Budget, OptimizeSettings  # noqa: E402

# Outcomes of a realistic search: refusals, a wrong kernel, two promotions, a shape regression.
STEPS = [
    {"source": source(1.3, compile="fail")},
    {"source": source(1.3, gate="fail")},
    {"source": source(1.2, tag="a")},  # promoted: 1.2x
    {"source": source(1.1, tag="b")},  # slower than the incumbent
    {"source": source(1.5, tag="c", slow="G4:0.75")},  # faster, but G4 slower than the incumbent
    {"source": source(1.32, tag="d")},  # promoted: 1.32x
]
COMPETITORS = {"fla": 80.0, "slowlib": 150.0}  # µs on every shape (fake H200 baseline: 100 µs)


def run_loop_in(project: Path, timing: str, steps=STEPS, tokens: int = 0, competitors: bool = True) -> Path:
    op = get_op("gdn_prefill", project)
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=len(steps)), commit=True,
                                interpreter=timing != "gpu")
    ev = FakeEvaluator(op, timing=timing)
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, ScriptedBackend(steps, tokens=tokens), ev)
    if competitors:  # the loop does not time competitors yet: what run.json would carry if it did
        run = store.read_run()
        shapes = list(run.baseline.baseline_us)
        run.baseline.competitors_us = {n: {s: us for s in shapes} for n, us in COMPETITORS.items()}
        store.update_run(baseline=run.baseline)
    store.close()
    return store.path
