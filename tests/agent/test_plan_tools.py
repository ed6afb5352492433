"""Tools only where usable (issue 36, point 4), through the real SDK clients and the fake servers: the plan
request keeps the tool definitions (the cached prefix stays the one codegen sends) but asks for no tool call
(tool_choice none); a stand-in that calls every tool it is offered in every request, plan and codegen, still
produces a candidate, on a server that honours tool_choice and on one that ignores it."""

from __future__ import annotations

import pytest
from answers_text import GOOD_PLAN
from fake_servers import Answer, Call, FakeServer, tool_choice_none, tool_results, user_text
from fakes import FakeEvaluator, make_project  # noqa: E402
from llm_helpers import TOY, backend, context
from standins import is_plan

from aka.agent.llm.base import get_backend  # noqa: E402
from aka.agent.llm.chat import NO_PLAN
from aka.config import LLMConfig, LLMSettings  # noqa: E402
from aka.contract.ops import get_op
from aka.run.loop import run_loop  # noqa: E402
from aka.run.setup import prepare_run  # noqa: E402
from aka.settings import Budget, OptimizeSettings  # noqa: E402

ALL = ["read_file", "edit", "compile", "check", "time", "profile", "submit"]


def offered(body) -> list[str]:
    """The tool names a request offers, in either wire format."""
    return [t.get("name") or t["function"]["name"] for t in body.get("tools") or []]


class EveryTool:
    """Calls every tool the request offers, in every request, with arguments that work on the fake project's
    gdn_prefill (the k-th codegen request edits the tag to every<k>); asked for a plan it also writes `plan`
    (GOOD_PLAN, or "": tool calls only)."""

    ARGS = {"read_file": {"path": "workloads/gdn_prefill.yaml"}, "check": {"shapes": "smoke"},
            "time": {"shapes": ["G1"]}, "profile": {"shape": "G1"}, "submit": {"note": "every tool"}}

    def __init__(self, plan: str = GOOD_PLAN):
        self.plan, self.codegen = plan, 0

    def __call__(self, body):
        if not is_plan(body) and not tool_results(body):
            self.codegen += 1
        args = dict(self.ARGS, edit={"search": "# tag=baseline\n", "replace": f"# tag=every{self.codegen}\n"})
        calls = [Call(n, args.get(n, {})) for n in offered(body)]
        return Answer(self.plan if is_plan(body) else "", calls=calls)


def loop_run(kind, server, tmp_path, monkeypatch, budget):
    project = make_project(tmp_path)
    op = get_op("gdn_prefill", project)
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "test-key")
    llm = LLMSettings(base_url=server.url, sweep=0, tools=True)
    settings = OptimizeSettings(op="gdn_prefill", backend=kind, llm=llm, prepare_ahead=0, interpreter=True,
                                budget=Budget(max_candidates=budget))
    be = get_backend(kind, op=op, llm=llm, config=LLMConfig(max_retries=0, timeout_s=10))
    ev = FakeEvaluator(op, timing="interpreter")  # time() and profile() answer that they need a GPU
    store = prepare_run(project / "runs", settings, op, ev)
    return store, run_loop(store, settings, op, be, ev)


@pytest.mark.parametrize("server_kind,plan", [("honours", GOOD_PLAN), ("ignores", GOOD_PLAN), ("ignores", "")],
                         ids=["honours-tool-choice", "ignores-tool-choice", "ignores-tool-choice-no-plan-text"])
def test_a_model_calling_every_offered_tool_in_every_request_still_produces_candidates(
        kind, server_kind, plan, tmp_path, monkeypatch):
    with FakeServer(kind, responder=EveryTool(plan), honour_tool_choice=server_kind == "honours") as server:
        store, summary = loop_run(kind, server, tmp_path, monkeypatch, 2)
        requests, billed = list(server.requests), list(server.usages)
    att = store.attempts()
    assert len(att) == 2 and summary["attempts"] == 2
    for a in att:  # each attempt reached the check/compile stage with a kernel source: not a failed plan
        assert a.failed_stage == "", (a.failed_stage, a.decision.reason)
        assert a.gate.passed and a.submit_note == "every tool"
        assert [c["name"] for c in a.tool_calls] == ALL  # codegen served all seven calls of its one turn
        assert [c["ok"] for c in a.tool_calls] == [True, True, True, True, False, False, True]  # no GPU here
        assert a.usage.input_tokens == sum(c["input_tokens"] for c in a.llm_calls) > 0  # every call counted
        assert a.usage.output_tokens == sum(c["output_tokens"] for c in a.llm_calls) > 0
    cands = sorted(p for p in (tmp_path / "proj" / "runs" / "gdn_prefill").glob("*/candidates/[0-9].py"))
    assert len(cands) == 2 and all("# tag=every" in p.read_text() for p in cands)
    assert summary["tokens"] == sum(a.tokens for a in att)
    plans = [b for b in requests if is_plan(b)]
    codegen = [b for b in requests if not is_plan(b)]
    assert plans and len(codegen) == 2  # one codegen turn an attempt: it submitted
    for b in requests:  # the same seven definitions on every request, so the cached prefix is the same
        assert offered(b) == ALL and b["tools"] == requests[0]["tools"]
    assert all(tool_choice_none(b) for b in plans) and not any(tool_choice_none(b) for b in codegen)
    if not plan:  # tool calls only: answered, asked again, then the attempt goes on to codegen without a plan
        assert len(plans) == 6 and all(a.plan.hypothesis == NO_PLAN for a in att)
        assert [c["stage"] for c in att[0].llm_calls] == ["plan", "plan-retry", "plan-retry", "codegen"]
        return
    # the plan in the text is used, tool calls or not: one plan request per attempt
    assert len(plans) == 2 and [c["stage"] for c in att[0].llm_calls] == ["plan", "codegen"]
    assert att[0].plan.param_ranges == {"BLOCK": [128, 256, 512]}
    # prompt caching, billed as each API documents it: plan, codegen, plan, codegen
    if kind == "anthropic":  # tool_choice keeps tools and system cached, the messages are cached per tool_choice
        assert billed[1]["cache_read_input_tokens"] > 0  # codegen reads the tools and system the plan wrote
        assert billed[2]["cache_read_input_tokens"] == billed[0]["cache_creation_input_tokens"]  # the whole prefix
        assert billed[3]["cache_creation_input_tokens"] == 0 and billed[3]["cache_read_input_tokens"] > 0
    else:
        assert all(b["cached_tokens"] > 0 for b in billed[1:])


def test_tool_calls_in_the_plan_step_are_answered_and_read_file_works_there(kind, tmp_path, monkeypatch):
    """A server that ignores tool_choice none: read_file is served for real while planning, the tools that
    work on the candidate say they come in the next step, and the plan is asked for again."""
    op = get_op("scale_add", TOY)
    d = tmp_path / "runs" / "scale_add" / "r1"
    d.mkdir(parents=True)
    with FakeServer(kind, honour_tool_choice=False) as server:
        server.add(Answer("Let me look first.", calls=[Call("read_file", {"path": "workloads/scale_add.yaml"}),
                                                       Call("compile")]), GOOD_PLAN)
        plan, used = backend(kind, server, op, monkeypatch).plan(context(op, d))
        first, retry = server.requests
    assert plan.param_ranges == {"BLOCK": [128, 256, 512]}
    assert first["tools"] == retry["tools"] and len(first["tools"]) == 7
    assert tool_choice_none(first) and tool_choice_none(retry)  # the server ignored it
    read, compiled = tool_results(retry)
    assert "case_params" in read  # the contract, as read_file returned it
    assert "compile" in compiled and "next step" in compiled
    assert "plan JSON" in user_text(retry["messages"][-1])
    assert used.input_tokens > 0 and used.output_tokens > 0
