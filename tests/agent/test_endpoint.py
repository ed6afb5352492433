"""A dead or failing LLM endpoint (issue 21, item 5): found before the baseline is measured, and when it
dies mid-run the run stops as the endpoint's fault, recorded, with a resume hint only where it helps.

Servers are the local fake (tests/support/fake_servers.py); a dead one is a closed port on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from answers_text import GOOD_PLAN, fenced
from fake_servers import Error, FakeServer, dead_url
from fakes import FakeEvaluator, make_project, source  # noqa: E402
from typer.testing import CliRunner

from aka.agent.llm.base import ProviderError, get_backend  # noqa: E402
from aka.agent.llm.endpoint import http_fault  # noqa: E402
from aka.cli.main import app  # noqa: E402
from aka.cli.optimize import fault_line  # noqa: E402
from aka.config import LLMConfig, LLMSettings  # noqa: E402
from aka.contract.ops import get_op  # noqa: E402
from aka.run.loop import run_loop  # noqa: E402
from aka.run.setup import prepare_run  # noqa: E402
from aka.settings import Budget, OptimizeSettings  # noqa: E402


def test_a_dead_endpoint_fails_the_probe_in_one_line_naming_the_url_and_the_flag(kind, monkeypatch):
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "test-key")
    url = dead_url(kind)
    be = get_backend(kind, llm=LLMSettings(base_url=url, model="m"), config=LLMConfig(max_retries=0, timeout_s=5))
    with pytest.raises(ProviderError) as err:
        be.probe()
    msg = str(err.value)
    assert url in msg and "not reachable" in msg and "--base-url" in msg and "\n" not in msg


def test_without_a_model_a_dead_server_is_named_as_dead_not_as_a_missing_model(monkeypatch):
    url = dead_url("openai")
    with pytest.raises(ProviderError) as err:
        get_backend("openai", llm=LLMSettings(base_url=url), config=LLMConfig(max_retries=0, timeout_s=5))
    assert url in str(err.value) and "--base-url" in str(err.value) and "--model" not in str(err.value)


def test_a_reachable_endpoint_passes_the_probe_and_a_rejected_key_fails_it(kind, server, monkeypatch):
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "test-key")
    be = get_backend(kind, llm=LLMSettings(base_url=server.url, model="m"), config=LLMConfig(max_retries=0))
    be.probe()
    assert server.paths[-1] == "/v1/models" and server.requests == []  # a GET, no model call, no tokens
    err = http_fault(kind, 401, "invalid x-api-key")
    assert err.resumable and f"{kind.upper()}_API_KEY" in str(err)


def _run(kind, server, tmp_path, monkeypatch, evaluator_cls):
    project = make_project(tmp_path)
    op = get_op("gdn_prefill", project)
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "test-key")
    llm = LLMSettings(base_url=server.url, sweep=0)
    settings = OptimizeSettings(op="gdn_prefill", backend=kind, llm=llm, prepare_ahead=0,
                                budget=Budget(max_candidates=3))
    be = get_backend(kind, op=op, llm=llm, config=LLMConfig(max_retries=0, timeout_s=5))
    ev = evaluator_cls(op, timing="gpu")
    store = prepare_run(project / "runs", settings, op, ev)
    return project, store, run_loop(store, settings, op, be, ev)


def test_an_endpoint_that_dies_mid_run_stops_it_as_an_endpoint_fault(kind, tmp_path, monkeypatch):
    server = FakeServer(kind).add(GOOD_PLAN, fenced(source(1.3, "a")))

    class DiesWhileTiming(FakeEvaluator):  # the server goes away while attempt 0 is measured
        def screen(self, *args, **kw):
            server.close()
            return super().screen(*args, **kw)

    project, store, summary = _run(kind, server, tmp_path, monkeypatch, DiesWhileTiming)
    assert len(store.attempts()) == 1  # attempt 0 finished; no attempt is charged with the fault
    run = store.read_run()
    assert run.status == "stopped" and run.summary["fault"]["resumable"]
    assert summary["stop_reason"].startswith(f"LLM endpoint fault: {kind} endpoint {server.url} is not reachable")
    assert "--resume " + store.run_id in fault_line(summary["fault"], store.run_id)
    store.close()
    monkeypatch.setenv("AKA_ROOT", str(project))
    shown = CliRunner().invoke(app, ["show", store.run_id], env={"COLUMNS": "300"})
    assert shown.exit_code == 0 and "stopped: LLM endpoint fault:" in shown.stdout and "not reachable" in shown.stdout
    data = json.loads(CliRunner().invoke(app, ["show", store.run_id, "--json"]).stdout)
    assert data["status"] == "stopped" and data["fault"]["kind"] == "endpoint"


def test_a_request_the_server_refuses_stops_the_run_without_a_resume_hint(kind, tmp_path, monkeypatch):
    with FakeServer(kind).add(Error(400, "prompt is too long")) as server:
        _, store, summary = _run(kind, server, tmp_path, monkeypatch, FakeEvaluator)
    assert store.attempts() == [] and not summary["fault"]["resumable"]
    line = fault_line(summary["fault"], store.run_id)
    assert "prompt is too long" in line and "--resume" not in line and "\n" not in line
