"""Tools inside an attempt (issue 19, part 2) over the real SDK clients and the fake servers: a stand-in
that calls read_file, edit, compile, check and submit reaches the gate on each backend and is recorded
with its tool calls; an unknown tool, bad arguments and calls past the cap come back to the model as
error results and the run goes on; the cap and the token budget end a conversation that would not."""

from __future__ import annotations

import json

import pytest
from answers_text import GOOD_PLAN
from fake_servers import Answer, Call, FakeServer, tool_choice_none, tool_results, user_text
from fakes import FakeEvaluator, make_project  # noqa: E402
from llm_helpers import TOY, aka, backend, context, run_dir
from standins import ToolModel, is_plan, toy_calls

from aka.agent.llm.base import (
    AttemptFailed,
    get_backend,  # noqa: E402
)
from aka.config import LLMConfig, LLMSettings  # noqa: E402
from aka.contract.ops import get_op
from aka.records import Plan, read_attempts
from aka.run.loop import run_loop  # noqa: E402
from aka.run.setup import prepare_run  # noqa: E402
from aka.settings import Budget, OptimizeSettings  # noqa: E402


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_a_tools_stand_in_reaches_the_gate_and_is_recorded_with_its_calls(kind, toy_project):
    """Through `aka optimize` on CPU: the tools run the real policy check, interpreter compile and gate."""
    with FakeServer(kind, responder=ToolModel(toy_calls(256))) as server:
        r = aka(toy_project, "optimize", "scale_add", "--backend", kind, "--base-url", server.url, "--budget", "1",
                "--tools", env_extra={f"{kind.upper()}_API_KEY": "test-key"})
        assert r.returncode == 0, r.stdout + r.stderr
        results = tool_results(server.requests[-1])
    d = run_dir(toy_project, r.stdout)
    (a,) = read_attempts(d)
    calls = a.tool_calls
    assert [c["name"] for c in calls] == ["read_file", "edit", "compile", "check", "submit"]
    assert all(c["ok"] for c in calls), calls
    assert "case_params" in results[0]  # the contract, as read_file returned it to the model
    assert calls[2]["result"].startswith("policy ok; compile ok (Triton's CPU interpreter")
    assert "offline sm_90 compile (Triton's ptxas, no GPU" in results[2] and "\n_kernel[" in results[2]
    assert " sm_90 " in results[2] and "regs cuobjdump" in results[2]  # registers without a GPU
    assert calls[3]["result"].startswith("passed: ")
    assert a.submit_note == "BLOCK 256" and a.failed_stage == "" and a.gate.passed
    assert a.decision.reason == "not promoted: interpreter timings cannot promote"  # gated and timed
    assert 'CONFIG = {"BLOCK": 256}' in (d / "candidates" / "0.py").read_text()
    # tokens per attempt and per tool call: each call carries its share of the model turn that made it
    assert [c["stage"] for c in a.llm_calls] == ["plan", "codegen", "tools", "tools", "tools", "tools"]
    assert a.usage.input_tokens == sum(c["input_tokens"] for c in a.llm_calls)
    assert all(c["usage"]["output_tokens"] > 0 for c in calls)
    assert sum(c["usage"]["input_tokens"] for c in calls) == sum(c["input_tokens"] for c in a.llm_calls[1:])
    show = aka(toy_project, "show", d.name)
    assert show.returncode == 0, show.stderr
    assert "#0 LLM: " in show.stdout and "tools: read_file, edit, compile, check, submit" in show.stdout
    assert " 4. check(" in show.stdout and "ok" in show.stdout and "uncached" in show.stdout
    js = json.loads(aka(toy_project, "show", d.name, "--json").stdout)
    assert [c["name"] for c in js["attempts"][0]["tool_calls"]] == [c["name"] for c in calls]


# ---------------------------------------------------------------------------------------------
# errors come back to the model; the run goes on (the loop with the loop tests' fake evaluator)


def loop_run(kind, server, tmp_path, monkeypatch, budget, **llm):
    project = make_project(tmp_path)
    op = get_op("gdn_prefill", project)
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "test-key")
    llm = LLMSettings(base_url=server.url, sweep=0, **llm)
    settings = OptimizeSettings(op="gdn_prefill", backend=kind, llm=llm, prepare_ahead=0,
                                budget=Budget(max_candidates=budget))
    be = get_backend(kind, op=op, llm=llm, config=LLMConfig(max_retries=0, timeout_s=10))
    ev = FakeEvaluator(op, timing="gpu")
    store = prepare_run(project / "runs", settings, op, ev)
    return store, run_loop(store, settings, op, be, ev)


class Attempts:
    """One ToolModel per attempt (the loop plans once per attempt here: no plan retries, nothing ahead)."""

    def __init__(self, *calls):
        self.models, self.k = [ToolModel(c) for c in calls], -1

    def __call__(self, body):
        if is_plan(body):
            self.k += 1
            return GOOD_PLAN
        return self.models[self.k](body)


EDIT = Call("edit", {"search": "# tag=baseline\n", "replace": "# tag=tooled\n"})


def test_unknown_tools_bad_arguments_and_calls_past_the_cap_are_error_results(kind, tmp_path, monkeypatch):
    bad = [Call("frobnicate", {"x": 1}), Call("check", {"shapes": 5}), Call("edit", {"search": "x"}),
           Call("read_file", {"path": "../../etc/passwd"})]
    if kind == "openai":  # only chat completions can carry arguments that are not JSON at all
        bad.append(Call("compile", '{"oops'))
    calls = [*bad, EDIT, Call("compile"), Call("check", {"shapes": "edge"})]
    calls += [Call("read_file", {"path": "workloads/gdn_prefill.yaml"})] * (17 - len(calls))  # the 17th is over
    calls.append(Call("submit", {"note": "tag"}))  # accepted past the cap
    second = [Call("edit", {"search": "# tag=baseline\n", "replace": "# tag=second\n"}), Call("submit")]
    with FakeServer(kind, responder=Attempts(calls, second)) as server:
        store, summary = loop_run(kind, server, tmp_path, monkeypatch, 2, max_tool_calls=16)
        answers = tool_results(server.requests[18])  # plan, then 18 tool turns: this one carries 17 results
    a0, a1 = store.attempts()
    recs = a0.tool_calls
    assert len(recs) == 18 and [c["ok"] for c in recs[: len(bad)]] == [False] * len(bad)
    why = [c["result"] for c in recs[: len(bad)]]
    assert why[0].startswith("error: unknown tool 'frobnicate'; the tools are read_file, edit, compile")
    assert "bad arguments for check (shapes: Input should be 'smoke' or 'edge')" in why[1]
    assert "bad arguments for edit (replace: Field required)" in why[2]
    assert "outside what read_file may read" in why[3]
    if kind == "openai":
        assert "not valid JSON" in why[4]
    assert all(c["ok"] for c in recs[len(bad):16]) and recs[16]["n"] == 17 and not recs[16]["ok"]
    assert "cap of 16 tool calls is reached" in recs[16]["result"] and recs[17]["ok"]  # submit past the cap
    assert any("cap of 16" in x for x in answers)  # the model got the error as a tool result
    for a in (a0, a1):  # the run went on: both attempts reached the gate
        assert a.failed_stage == "" and a.gate.passed
    assert summary["attempts"] == 2


def test_a_model_that_keeps_calling_past_the_cap_is_stopped(kind, server, tmp_path, monkeypatch):
    op = get_op("scale_add", TOY)
    d = tmp_path / "runs" / "scale_add" / "r1"
    (d / "candidates").mkdir(parents=True)
    edit = Call("edit", {"search": 'CONFIG = {"BLOCK": 128}', "replace": 'CONFIG = {"BLOCK": 512}'})
    server.responder = ToolModel([edit] + [Call("read_file", {"path": "wiki/"})] * 40)
    ctx = context(op, d)
    src, _ = backend(kind, server, op, monkeypatch, max_tool_calls=3).candidate(Plan(hypothesis="h"), ctx)
    assert 'CONFIG = {"BLOCK": 512}' in src  # the edit stands: handed in as if submitted
    assert len(ctx.trace["tool_calls"]) == 3 + 5 and ctx.trace["submit_note"].startswith("(ended by aka: 8 tool calls")
    server.responder = ToolModel([Call("read_file", {"path": "wiki/"})] * 40)
    with pytest.raises(AttemptFailed, match="never changed"):
        backend(kind, server, op, monkeypatch, max_tool_calls=3).candidate(Plan(hypothesis="h"), context(op, d))


def test_the_run_token_budget_ends_the_tool_calls(kind, server, tmp_path, monkeypatch):
    op = get_op("scale_add", TOY)
    d = tmp_path / "runs" / "scale_add" / "r1"
    (d / "candidates").mkdir(parents=True)
    server.responder = ToolModel(toy_calls(512))
    ctx = context(op, d)
    ctx.tokens_left = 1  # spent by the first turn
    with pytest.raises(AttemptFailed, match="token budget ran out during the tool calls"):
        backend(kind, server, op, monkeypatch).candidate(Plan(hypothesis="h"), ctx)
    assert len(server.requests) == 1 and ctx.trace["tool_calls"][0]["name"] == "read_file"


def test_the_plan_request_sends_the_tools_but_no_call_can_be_made(kind, server, tmp_path, monkeypatch):
    """tool_choice none: the definitions stay (the cached prefix), the server drops the calls (as the APIs do).
    A server that ignores it: tests/agent/test_plan_tools.py."""
    op = get_op("scale_add", TOY)
    d = tmp_path / "runs" / "scale_add" / "r1"
    d.mkdir(parents=True)
    server.add(Answer("Let me look first.", calls=[Call("read_file", {"path": "wiki/"})]), GOOD_PLAN)
    plan, _ = backend(kind, server, op, monkeypatch).plan(context(op, d))
    assert plan.param_ranges == {"BLOCK": [128, 256, 512]}
    first, retry = server.requests
    assert first["tools"] == retry["tools"] and len(first["tools"]) == 7  # the same tools on every call
    assert tool_choice_none(first) and tool_choice_none(retry) and tool_results(retry) == []
    assert "could not be used as a plan" in user_text(retry["messages"][-1])
    exchange = json.loads((d / "llm" / "0000.json").read_text())
    assert exchange["request"]["tool_choice"] == "none" and len(exchange["request"]["tools"]) == 7


def test_without_tools_no_definitions_are_sent(kind, server, tmp_path, monkeypatch):
    op = get_op("scale_add", TOY)
    d = tmp_path / "runs" / "scale_add" / "r1"
    d.mkdir(parents=True)
    server.add(GOOD_PLAN)
    backend(kind, server, op, monkeypatch, tools=False).plan(context(op, d))
    assert "tools" not in server.requests[0]


def test_a_tools_attempt_replays_to_the_same_candidate_without_a_server(kind, server, tmp_path, monkeypatch):
    op = get_op("scale_add", TOY)
    runs = tmp_path / "runs" / "scale_add"
    for r in ("r1", "r2"):
        (runs / r / "candidates").mkdir(parents=True)
        (runs / r / "run.json").write_text("{}")
    server.responder = ToolModel([Call("read_file", {"path": "wiki/"}), *toy_calls(512)[1:2], Call("submit")])
    src, used = backend(kind, server, op, monkeypatch).candidate(Plan(hypothesis="h"), context(op, runs / "r1"))
    monkeypatch.delenv(f"{kind.upper()}_API_KEY")
    here = type(op)(op.contract, tmp_path)  # the op with runs/ under tmp
    rp = get_backend("replay", op=here, llm=LLMSettings(replay_from="r1"), config=LLMConfig())
    ctx = context(op, runs / "r2")
    src2, used2 = rp.candidate(Plan(hypothesis="h"), ctx)
    assert src2 == src and 'CONFIG = {"BLOCK": 512}' in src and used2 == used
    assert [c["name"] for c in ctx.trace["tool_calls"]] == ["read_file", "edit", "submit"]
    assert len(server.requests) == 3  # one call a turn, none of them asked again
