"""`aka runs`, `show`, the live view and optimize's Ctrl-C paths, in process (issue 21, item 8).

optimize cannot be handed a fake evaluator from the command line, so the Ctrl-C tests patch the
evaluator and the backend factory the command looks up when it runs."""

from __future__ import annotations

import io
import json
import re

import pytest
from fakes import FakeEvaluator, source
from rich.console import Console
from typer.testing import CliRunner

import aka.agent.llm.base
import aka.evaluate.parent.evaluator
import aka.run.setup
from aka.agent.llm.scripted import ScriptedBackend
from aka.cli.main import app
from aka.cli.optimize import LiveView
from aka.cli.runs import attempts_table
from aka.records import Attempt
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.settings import Budget, OptimizeSettings


@pytest.fixture
def cli(project, monkeypatch):
    monkeypatch.setenv("AKA_ROOT", str(project))
    return lambda *args: CliRunner().invoke(app, list(args))


def _run(project, op, steps, timing="gpu", **kw):
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=len(steps)),
                                interpreter=timing != "gpu", **kw)
    ev = FakeEvaluator(op, timing=timing)
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, ScriptedBackend(steps), ev)
    store.close()
    return store


def test_runs_prints_a_dash_for_a_run_with_no_scored_attempt(project, op, cli):
    store = _run(project, op, [{"source": source(1.3, check="fail")}, {"source": source(1.3, gate="fail")}])
    rows = json.loads(cli("runs", "--json").stdout)
    assert [(r["run_id"], r["attempts"], r["best"]) for r in rows] == [(store.run_id, 2, None)]
    assert set(rows[0]) == {"run_id", "op", "started", "status", "attempts", "budget", "best", "promoted", "device"}
    table = cli("runs").stdout
    assert "0.000x" not in table and "│ - " in table


def test_show_prints_the_settings_and_json_has_stable_keys(project, op, cli):
    store = _run(project, op, [{"source": source(1.2)}], seed=7, gate_rounds=2)
    out = cli("show", store.run_id).stdout
    assert "settings: backend offline" in out and "stop at 1 candidates" in out and "seed 7" in out
    assert "margin 5%" in out and "gate rounds 2" in out
    data = json.loads(cli("show", store.run_id, "--json").stdout)
    assert set(data) == {"run_id", "op", "status", "started", "device", "settings", "baseline", "stopped", "fault",
                         "best_score", "incumbent", "promotions", "attempts"}
    assert data["incumbent"] == "candidate 0" and data["attempts"][0]["verdict"] == "promoted"
    assert set(data["attempts"][0]) == {"n", "stage", "plan", "vs_baseline", "vs_incumbent", "tokens", "usage",
                                        "llm_calls", "tool_calls", "verdict", "reason"}


def test_decision_text_is_cut_at_a_word_boundary():
    reason = "gate failed on 3 shape(s): " + " ".join(f"word{i}xyz" for i in range(40))
    rec = Attempt.model_validate({"n": 0, "failed_stage": "gate", "plan": {"hypothesis": "h"}, "score": None,
                                  "decision": {"promote": False, "verdict": "rejected", "reason": reason}})
    buf = io.StringIO()
    Console(file=buf, width=300).print(attempts_table([rec], "t"))
    shown = buf.getvalue().split("│")[-2].split()
    assert shown[-1].endswith("…") and len(shown) < len(reason.split())
    assert all(w in reason.split() for w in shown[:-1]) and shown[-1][:-1] in reason.split()


class _Live:
    def __init__(self):
        self.console, self.panels = Console(file=io.StringIO()), []

    def update(self, panel):
        self.panels.append(panel.renderable)


def test_the_live_panel_numbers_attempts_as_the_table_does(project, op):
    live = _Live()
    view = LiveView(live, 2)
    seen = []

    class Recording:
        def update(self, **fields):
            seen.append(dict(fields))
            view.update(**fields)

    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=2), prepare_ahead=0)
    ev = FakeEvaluator(op)
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, ScriptedBackend([{"source": source(1.1, "a")}, {"source": source(1.2, "b")}]),
             ev, Recording())
    plans = [f for f in seen if f.get("stage") == "plan"]
    assert [f.get("attempt") for f in plans] == [0, 1]  # the attempt being planned, numbered as "#0" in the table
    assert any(p.startswith("attempt #0 ") for p in live.panels) and not any("round" in p for p in live.panels)


def _optimize(project, monkeypatch, backend):
    monkeypatch.setattr(aka.evaluate.parent.evaluator, "RealEvaluator",
                        lambda op, settings: FakeEvaluator(op, timing="interpreter"))
    monkeypatch.setattr(aka.agent.llm.base, "get_backend", lambda name, **kw: backend)
    return CliRunner().invoke(app, ["optimize", "gdn_prefill", "--budget", "4"], env={"AKA_ROOT": str(project)})


class _StopsAt(ScriptedBackend):
    """Ctrl-C while attempt `at` is planned."""

    def __init__(self, steps, at):
        super().__init__(steps)
        self.at = at

    def plan(self, ctx):
        if ctx.attempt == self.at:
            raise KeyboardInterrupt
        return super().plan(ctx)


def test_after_ctrl_c_the_summary_reads_the_log(project, monkeypatch):
    res = _optimize(project, monkeypatch, _StopsAt([{"source": source(1.2, "a")}, {"source": source(0.9, "b")}], 2))
    assert res.exit_code == 130, res.output
    assert "incumbent now: baseline" in res.stdout and "best candidate vs baseline: 1.200x" in res.stdout
    run_json = next((project / "runs" / "gdn_prefill").glob("*/run.json"))
    run = json.loads(run_json.read_text())
    assert run["status"] == "interrupted" and run["summary"]["attempts"] == 2
    assert run["summary"]["best_score"] == pytest.approx(1.2)


def test_ctrl_c_during_the_baseline_says_so_and_that_nothing_was_recorded(project, monkeypatch):
    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(aka.run.setup, "prepare_run", interrupted)
    res = _optimize(project, monkeypatch, ScriptedBackend([]))
    assert res.exit_code == 130
    assert "interrupted while measuring the baseline; nothing was recorded" in res.stdout
    assert not (project / "runs" / "gdn_prefill").exists() or not list((project / "runs" / "gdn_prefill").iterdir())


class _Fails(ScriptedBackend):
    """Raises `exc` when attempt `at` is planned."""

    def __init__(self, steps, at, exc):
        super().__init__(steps)
        self.at, self.exc = at, exc

    def plan(self, ctx):
        if ctx.attempt == self.at:
            raise self.exc
        return super().plan(ctx)


def _run_json(project):
    return json.loads(next((project / "runs" / "gdn_prefill").glob("*/run.json")).read_text())


def test_an_endpoint_fault_mid_run_ends_optimize_with_the_fault_and_a_resume_hint(project, monkeypatch):
    from aka.agent.llm.base import ProviderError
    from aka.cli.optimize import EndpointFault

    dead = ProviderError("openai endpoint http://127.0.0.1:9/v1 is not reachable (Connection error.): start the "
                         "server or fix --base-url", True, "start the server or fix --base-url")
    res = _optimize(project, monkeypatch, _Fails([{"source": source(1.2, "a")}], 1, dead))
    run = _run_json(project)
    assert isinstance(res.exception, EndpointFault), res.output
    assert str(res.exception).endswith(f"resume with: aka optimize --resume {run['run_id']}")
    assert "stopped: LLM endpoint fault: openai endpoint" in res.stdout and "run crashed" not in res.stdout
    assert run["status"] == "stopped" and run["summary"]["attempts"] == 1


def test_a_crash_is_recorded_with_its_error_so_aka_show_prints_it(project, monkeypatch):
    res = _optimize(project, monkeypatch, _Fails([], 0, RuntimeError("planner bug")))
    assert isinstance(res.exception, RuntimeError)
    run = _run_json(project)
    assert run["status"] == "crashed" and run["error"] == "RuntimeError: planner bug"
    shown = CliRunner().invoke(app, ["show", run["run_id"]], env={"AKA_ROOT": str(project)})
    assert "stopped: crashed (RuntimeError: planner bug)" in shown.stdout


def test_resume_with_max_time_extends_a_run_its_time_limit_stopped(project, op, monkeypatch):
    # a device call's time cap stopped the run; the next call resumes it with a new limit for the whole run
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=2, max_time_s=1e-9), interpreter=True)
    ev = FakeEvaluator(op, timing="interpreter")
    first = prepare_run(project / "runs", settings, op, ev)
    run_loop(first, settings, op, ScriptedBackend([]), ev)
    first.close()
    assert json.loads((first.path / "run.json").read_text())["summary"]["attempts"] == 0
    backend = ScriptedBackend([{"source": source(1.2, "a")}, {"source": source(0.9, "b")}])
    monkeypatch.setattr(aka.evaluate.parent.evaluator, "RealEvaluator",
                        lambda op, settings: FakeEvaluator(op, timing="interpreter"))
    monkeypatch.setattr(aka.agent.llm.base, "get_backend", lambda name, **kw: backend)
    res = CliRunner().invoke(app, ["optimize", "--resume", first.run_id, "--budget", "2", "--max-time", "1e6"],
                             env={"AKA_ROOT": str(project)})
    assert res.exit_code == 0, res.output
    run = json.loads((first.path / "run.json").read_text())
    assert run["summary"]["attempts"] == 2 and run["settings"]["budget"]["max_time_s"] == 1e6


def test_resumed_settings_replace_only_the_limits_given():
    from aka.cli.optimize import resumed_settings

    s = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=5, max_time_s=100.0), seed=3)
    assert resumed_settings(s, None, None) == s
    t = resumed_settings(s, None, 900.0)
    assert (t.budget.max_candidates, t.budget.max_time_s, t.seed) == (5, 900.0, 3)
    assert resumed_settings(s, 30, None).budget.model_dump() == {**s.budget.model_dump(), "max_candidates": 30}


def test_without_budget_the_interpreter_runs_the_cpu_default(project, monkeypatch):
    from aka.settings import CPU_MAX_CANDIDATES, default_candidates

    assert default_candidates(True) == CPU_MAX_CANDIDATES and default_candidates(False) == Budget().max_candidates
    steps = [{"source": source(1.0 + i / 100, str(i))} for i in range(CPU_MAX_CANDIDATES + 2)]
    monkeypatch.setattr(aka.evaluate.parent.evaluator, "RealEvaluator",
                        lambda op, settings: FakeEvaluator(op, timing="interpreter"))
    monkeypatch.setattr(aka.agent.llm.base, "get_backend", lambda name, **kw: ScriptedBackend(steps))
    res = CliRunner().invoke(app, ["optimize", "gdn_prefill"], env={"AKA_ROOT": str(project)})
    assert res.exit_code == 0, res.output
    assert _run_json(project)["summary"]["attempts"] == CPU_MAX_CANDIDATES


def test_a_budget_below_one_is_a_usage_error(project):
    import re

    res = CliRunner().invoke(app, ["optimize", "gdn_prefill", "--budget", "0"], env={"AKA_ROOT": str(project)})
    text = re.sub(r"[│╭╮╰╯─\s]+", " ", res.output)  # the error box, unwrapped at any terminal width
    assert res.exit_code == 2 and "--budget" in text and "greater than or equal to 1" in text, res.output
    assert not (project / "runs" / "gdn_prefill").exists()  # refused before anything is measured


def test_workers_line_counts_in_words():
    """The summary line of a Ray run: one worker on one node reads as such (the H200 comparison of
    2026-12-03 printed "1 Ray workers ... 1 node(s)")."""
    from aka.cli.runs import workers_line
    from aka.records import RunRecord

    one = RunRecord(workers=[{"name": "NVIDIA H200", "node": "10.0.0.1"}])
    assert workers_line(one) == "measured on 1 Ray worker (NVIDIA H200; 1 node)"
    two = RunRecord(workers=[{"name": "NVIDIA H200", "node": "a"}, {"name": "NVIDIA H200", "node": "b"}])
    assert workers_line(two) == "measured on 2 Ray workers (NVIDIA H200; 2 nodes)"


def test_progress_is_plain_lines_when_stdout_is_not_a_terminal(project, monkeypatch):
    # issue 36: a redirected `aka optimize` on the H200 printed nothing for 5.5 minutes (rich's live
    # panel draws nothing into a file). Each set-up step, stage and decided attempt is a line with the
    # seconds since the start, and the summary says how long the set-up and the candidates took.
    monkeypatch.setattr(aka.evaluate.parent.evaluator, "RealEvaluator",
                        lambda op, settings: FakeEvaluator(op, timing="gpu"))
    steps = [{"source": source(1.2, "a")}, {"source": source(0.9, "b")}]
    monkeypatch.setattr(aka.agent.llm.base, "get_backend", lambda name, **kw: ScriptedBackend(steps))
    res = CliRunner().invoke(app, ["optimize", "gdn_prefill", "--budget", "2", "--no-commit"],
                             env={"AKA_ROOT": str(project), "COLUMNS": None})  # a log: no COLUMNS (160 wide)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "aka optimize gdn_prefill: starting"
    stamped = [x for x in lines if re.match(r"\[ *\d+\.\d s\] ", x)]
    text = "\n".join(stamped)
    for what in ("compile baseline.py", "time the baseline (baseline.py) on the smoke shapes", "gate the incumbent",
                 "#0 plan", "#0 ", "#1 "):
        assert what in text, (what, res.stdout)
    assert sum(1 for x in stamped if re.search(r"\] #\d+ +\d\.\d+x vs baseline", x)) == 2  # one per decided attempt
    assert re.search(r"set-up \d+ s; first candidate finished \d+ s after the start; median [\d.]+ s per candidate",
                     res.stdout)
