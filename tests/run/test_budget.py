"""Stop conditions: pure rules, then the same rules ending a real loop with a scripted backend."""

from __future__ import annotations

import types

import pytest
from fakes import FakeEvaluator, source

from aka.agent.llm.scripted import ScriptedBackend
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.run.supervisor import BudgetUsed, stop_reason
from aka.settings import Budget, OptimizeSettings


@pytest.mark.parametrize(
    "budget, used, words",
    [
        (Budget(max_candidates=3), BudgetUsed(candidates=3), "budget of 3"),
        (Budget(max_time_s=10), BudgetUsed(elapsed_s=10.5), "time limit"),
        (Budget(max_tokens=100), BudgetUsed(tokens=100), "token limit"),
        (Budget(patience=2), BudgetUsed(since_improvement=2), "patience"),
    ],
)
def test_each_stop_rule(budget, used, words):
    assert words in stop_reason(budget, used)
    below = used.model_copy(update={k: v - 1 if isinstance(v, int) and v else 0 for k, v in used})
    below.elapsed_s = 0.0
    assert stop_reason(budget, below) is None


def _run(project, op, budget: Budget, steps, tokens=0, timing="interpreter"):
    settings = OptimizeSettings(op="gdn_prefill", budget=budget, commit=False, interpreter=timing != "gpu")
    ev = FakeEvaluator(op, timing=timing)
    store = prepare_run(project / "runs", settings, op, ev)
    summary = run_loop(store, settings, op, ScriptedBackend(steps, tokens=tokens), ev)
    return summary, store.attempts()


def test_budget_counts_candidates(project, op):
    steps = [{"source": source(1.0 + i / 10)} for i in range(10)]
    summary, attempts = _run(project, op, Budget(max_candidates=4), steps)
    assert len(attempts) == 4 and "budget of 4" in summary["stop_reason"]


def test_patience_stops_after_rounds_without_improvement(project, op):
    speeds = [1.2, 1.1, 1.0, 0.9, 1.5, 1.6]
    steps = [{"source": source(s)} for s in speeds]
    summary, attempts = _run(project, op, Budget(max_candidates=10, patience=3), steps)
    assert [a.improved for a in attempts] == [True, False, False, False]
    assert "patience" in summary["stop_reason"]


def test_max_tokens_stops(project, op):
    steps = [{"source": source(1.0 + i / 10)} for i in range(10)]
    summary, attempts = _run(project, op, Budget(max_candidates=10, max_tokens=250), steps, tokens=100)
    assert len(attempts) == 2 and sum(a.tokens for a in attempts) >= 250 - 100
    assert "token limit" in summary["stop_reason"]


def test_max_time_stops(project, op, monkeypatch):
    import aka.run.loop as loop

    clock = iter(range(0, 10_000, 7))  # every monotonic() call of the loop advances 7 s (the set-up's: real time)
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(monotonic=lambda: float(next(clock))))
    steps = [{"source": source(1.0 + i / 10)} for i in range(10)]
    summary, attempts = _run(project, op, Budget(max_candidates=10, max_time_s=20), steps)
    assert 1 <= len(attempts) < 10 and "time limit" in summary["stop_reason"]


def test_exhausted_backend_ends_the_run_normally(project, op):
    summary, attempts = _run(project, op, Budget(max_candidates=10), [{"source": source(1.1)}])
    assert len(attempts) == 1 and "only 1 steps" in summary["stop_reason"]
