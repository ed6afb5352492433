"""The set-up's order (the incumbent compiled alone first) and the head start: the first candidates
planned and compiled while the set-up still gates and times the incumbent."""

from __future__ import annotations

import json
import threading
from collections import deque

import pytest
from fakes import FakeEvaluator, make_project, source

from aka.agent.llm.scripted import ScriptedBackend
from aka.contract.ops import get_op
from aka.run.loop import run_loop
from aka.run.prefetch import Quiet, head_start
from aka.run.setup import SetupError, prepare_run
from aka.run.store import RunStore
from aka.settings import Budget, OptimizeSettings

STEPS = [{"source": source(1.3, tag="a")}, {"source": source(1.0, tag="b", gate="fail")},
         {"source": source(1.4, tag="c")}]


class Overlap(FakeEvaluator):
    """Times the incumbent only once candidate 0 has compiled (or fails after 20 s): the head start
    must compile candidates while the set-up is still measuring."""

    def __init__(self, op, **kw):
        super().__init__(op, timing="gpu", **kw)
        self.first_compiled = threading.Event()
        self.setup_status: list[str] = []

    def compile(self, path, cases=None):
        out = super().compile(path, cases)
        if path.name == "0.py":
            self.first_compiled.set()
        return out

    def bench(self, path, shapes, beside=None, names=("candidate", "incumbent")):
        if names[0] in ("incumbent", "baseline"):  # the set-up's timing
            assert self.first_compiled.wait(20), "candidate 0 was not compiled during the set-up"
        return super().bench(path, shapes, beside, names)


def _settings(n: int = 3) -> OptimizeSettings:
    return OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=n), commit=False, prepare_ahead=1)


def _run(project, op, ev, head: bool):
    settings = _settings()
    backend, jobs = ScriptedBackend(STEPS), deque()
    start = (lambda s: jobs.extend(head_start(s, settings, op, backend, ev, Quiet()))) if head else None
    store = prepare_run(project / "runs", settings, op, ev, head_start=start)
    summary = run_loop(store, settings, op, backend, ev, head=jobs)
    return store, summary


def test_head_start_compiles_the_first_candidates_during_the_setup(project, op):
    ev = Overlap(op)
    store, summary = _run(project, op, ev, head=True)
    calls = ev.calls
    # the incumbent alone first; the candidates' checks before the set-up's timing
    assert calls[0] == "compile" and calls.index("check") < calls.index("bench")
    att = store.attempts()
    assert [a.n for a in att] == [0, 1, 2] and [a.failed_stage for a in att] == ["", "gate", ""]
    assert [a.promoted for a in att] == [True, False, True]
    run = store.read_run()
    assert run.status == "finished" and run.baseline.baseline_us
    assert set(run.setup_steps) == {"compile_incumbent", "gate", "timing"}


def test_head_start_decides_as_a_run_without_it(tmp_path):
    stores = []
    for head in (True, False):  # two projects: a run's promotion changes the next run's incumbent
        project = make_project(tmp_path / str(head))
        op = get_op("gdn_prefill", project)
        stores.append(_run(project, op, FakeEvaluator(op, timing="gpu"), head=head)[0])
    with_head, without = stores
    key = [(a.n, a.code_hash, a.failed_stage, a.promoted, a.score) for a in with_head.attempts()]
    assert key == [(a.n, a.code_hash, a.failed_stage, a.promoted, a.score) for a in without.attempts()]


def test_a_promoted_incumbent_compiles_alone_and_the_baseline_only_for_its_timing(project, op):
    (op.path("baseline").parent / "promoted.py").write_text(source(1.1, "promoted"))
    ev = FakeEvaluator(op, timing="gpu")
    store = prepare_run(project / "runs", _settings(), op, ev)
    timed = len(op.cases(store.read_run().baseline.shapes))
    assert ev.calls[0] == "compile" and f"compile:{timed}" in ev.calls[1:3]
    assert set(store.read_run().setup_steps) == {"compile_incumbent", "gate", "compile_baseline", "timing"}


class BrokenTiming(FakeEvaluator):
    def bench(self, path, shapes, beside=None, names=("candidate", "incumbent")):
        out = super().bench(path, shapes, beside, names)
        out.error = "worker crashed"
        return out


def test_a_failed_setup_leaves_no_run_behind(project, op):
    ev, seen = BrokenTiming(op, timing="gpu"), []

    def start(store: RunStore) -> None:
        seen.append(store.read_run().status)

    with pytest.raises(SetupError, match="timing the incumbent failed: worker crashed"):
        prepare_run(project / "runs", _settings(), op, ev, head_start=start)
    assert seen == ["setting up"]  # the head start saw the run directory, which is gone again
    assert not list((project / "runs" / "gdn_prefill").glob("*/run.json"))


def test_aka_optimize_on_a_gpu_starts_the_first_candidates_during_the_setup(project, monkeypatch):
    import torch
    from typer.testing import CliRunner

    import aka.agent.llm.base
    import aka.evaluate.parent.evaluator
    from aka.cli.main import app

    evs = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # what `optimize` asks to pick GPU settings
    monkeypatch.setattr(aka.evaluate.parent.evaluator, "RealEvaluator",
                        lambda op, settings: evs.append(Overlap(op)) or evs[-1])
    monkeypatch.setattr(aka.agent.llm.base, "get_backend", lambda name, **kw: ScriptedBackend(STEPS))
    res = CliRunner().invoke(app, ["optimize", "gdn_prefill", "--budget", "3", "--no-commit", "--no-profile",
                                   "--no-competitors"], env={"AKA_ROOT": str(project)})
    assert res.exit_code == 0, res.output
    (ev,) = evs
    assert ev.first_compiled.is_set() and ev.calls.index("check") < ev.calls.index("bench")
    run = json.loads(next((project / "runs" / "gdn_prefill").glob("*/run.json")).read_text())
    assert run["status"] == "finished" and run["summary"]["attempts"] == 3


def test_the_setup_counts_from_the_commands_start(project, op):
    import time

    store = prepare_run(project / "runs", _settings(), op, FakeEvaluator(op, timing="gpu"), t0=time.monotonic() - 100)
    assert 100 <= store.read_run().setup_s < 200  # what the user waited before prepare_run (imports, probe)
