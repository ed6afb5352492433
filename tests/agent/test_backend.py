"""The LLM backend over the real SDK clients and the fake servers: plan retries, repairs, unusable answers,
saved exchanges and their replay, parameter sweeps, and what the prompts carry."""

from __future__ import annotations

import json

import pytest
from answers_text import BAD_PLAN, GOOD_CODE, GOOD_PLAN, NOT_JSON, OTHER_OP_CODE, PLAN, PROSE, fenced
from fake_servers import user_text
from llm_helpers import TOY, backend, context, policy_verify

from aka.agent.llm.base import AttemptFailed, Context, get_backend
from aka.agent.llm.chat import read_exchanges
from aka.config import LLMConfig, LLMSettings
from aka.contract.ops import get_op
from aka.records import Plan


@pytest.fixture
def op():
    return get_op("scale_add", TOY)


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "runs" / "scale_add" / "r1"
    (d / "candidates").mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"baseline": {"timing": "interpreter",
                                                         "incumbent_us": {"S1": 50.0, "S2": 80.0}}}))
    return d


def last_user(body):
    return user_text(body["messages"][-1])


def test_malformed_plan_is_retried_with_the_validation_error(kind, server, op, run_dir, monkeypatch):
    server.add(BAD_PLAN, GOOD_PLAN)
    plan, usage = backend(kind, server, op, monkeypatch).plan(context(op, run_dir))
    assert plan.param_ranges == {"BLOCK": [128, 256, 512]} and plan.pattern is None
    assert len(server.requests) == 2
    retry = last_user(server.requests[1])
    assert "does not validate" in retry and "risk" in retry  # the model is told what was wrong
    ex = read_exchanges(run_dir)
    assert [e["stage"] for e in ex] == ["plan", "plan-retry"]
    assert usage.input_tokens == sum(e["usage"]["input_tokens"] for e in ex) > 0
    assert usage.output_tokens > 0 and usage.cached_tokens > 0


def test_a_plan_that_never_validates_fails_the_attempt(kind, server, op, run_dir, monkeypatch):
    server.add(NOT_JSON, "", NOT_JSON)
    with pytest.raises(AttemptFailed) as err:
        backend(kind, server, op, monkeypatch, plan_retries=2).plan(context(op, run_dir))
    assert err.value.stage == "plan" and "no valid plan after 3 answers" in str(err.value)
    assert err.value.usage.total > 0  # the tokens still count against --max-tokens


def test_code_that_fails_the_check_is_repaired(kind, server, op, run_dir, monkeypatch):
    broken = GOOD_CODE.replace("def scale_add(x, y):", "def scale_add(x, y)")  # syntax error
    server.add(fenced(broken), fenced(GOOD_CODE))
    src, usage = backend(kind, server, op, monkeypatch, repairs=2).candidate(
        Plan(**PLAN), context(op, run_dir, verify=policy_verify(op)))
    assert src == GOOD_CODE and len(server.requests) == 2
    repair = last_user(server.requests[1])
    assert "failed the check stage" in repair and "syntax error" in repair and "repair 1 of 2" in repair
    assert server.requests[1]["messages"][-2]["role"] == "assistant"  # the conversation continues
    assert usage.output_tokens > 0


def test_repairs_run_out_and_the_last_code_goes_to_the_loop(kind, server, op, run_dir, monkeypatch):
    broken = GOOD_CODE.replace("def scale_add(x, y):", "def scale_add(x, y)")
    server.add(fenced(broken), fenced(broken))
    src, _ = backend(kind, server, op, monkeypatch, repairs=1).candidate(
        Plan(**PLAN), context(op, run_dir, verify=policy_verify(op)))
    assert src == broken and len(server.requests) == 2  # the loop's own check records the failure


@pytest.mark.parametrize("answer,why", [(PROSE, "no ```python block (prose only)"), ("", "the answer is empty"),
                                        (fenced(OTHER_OP_CODE), "defines no function 'scale_add' (it defines "
                                                                "fa4_decode: code for another op?)")],
                         ids=["prose", "empty", "other-op"])
def test_unusable_code_answers_fail_the_attempt_with_their_reason(kind, server, op, run_dir, monkeypatch,
                                                                  answer, why):
    server.add(answer)
    with pytest.raises(AttemptFailed) as err:
        backend(kind, server, op, monkeypatch).candidate(Plan(**PLAN), context(op, run_dir))
    assert err.value.stage == "codegen" and why in str(err.value)
    assert len(server.requests) == 1  # no repair for an answer that is not code for this op


def test_replay_answers_exactly_as_recorded_without_a_server(kind, server, op, run_dir, monkeypatch):
    server.add(BAD_PLAN, GOOD_PLAN, fenced(GOOD_CODE))
    be = backend(kind, server, op, monkeypatch)
    ctx = context(op, run_dir)
    plan, u1 = be.plan(ctx)
    src, u2 = be.candidate(plan, ctx)
    new_dir = run_dir.parent / "r2"
    (new_dir / "candidates").mkdir(parents=True)
    (new_dir / "run.json").write_text((run_dir / "run.json").read_text())  # same figures: same prompts
    monkeypatch.delenv(f"{kind.upper()}_API_KEY")
    op_here = type(op)(op.contract, run_dir.parents[2])  # the op with runs/ under tmp
    rp = get_backend("replay", op=op_here, llm=LLMSettings(replay_from="r1"), config=LLMConfig())
    ctx2 = context(op, new_dir)
    plan2, v1 = rp.plan(ctx2)
    src2, v2 = rp.candidate(plan2, ctx2)
    assert (plan2, src2) == (plan, src) and (v1 + v2) == (u1 + u2)
    replayed = read_exchanges(new_dir)
    assert len(replayed) == 3 and all(e["response"]["request_matches"] for e in replayed)
    assert len(server.requests) == 3  # nothing new reached the server


def test_a_plans_parameter_ranges_are_swept_by_the_offline_search(kind, server, op, run_dir, monkeypatch):
    (run_dir / "candidates" / "0.py").write_text(GOOD_CODE)  # BLOCK 256, measured and passed
    parent = {"n": 0, "plan": Plan(**PLAN).model_dump(), "config": {}, "score": 1.1, "failed_stage": ""}
    be = backend(kind, server, op, monkeypatch, sweep=2)
    seen = []
    history = [parent]
    for n in (1, 2):
        plan, usage = be.plan(context(op, run_dir, n, history))
        src, _ = be.candidate(plan, context(op, run_dir, n, history))
        assert plan.pattern == "sweep:0" and usage.total == 0
        block = plan.fixed_config()["BLOCK"]
        assert block in (128, 512) and f"CONFIG = {{'BLOCK': {block}}}" in src
        seen.append(block)
        history.append({"n": n, "plan": plan.model_dump(), "config": plan.fixed_config(), "score": 1.0,
                        "failed_stage": ""})
    assert sorted(seen) == [128, 512] and server.requests == []  # no model call for a sweep point
    server.add(GOOD_PLAN)  # sweep budget (2) used: the model plans again
    assert be.plan(context(op, run_dir, 3, history))[0].pattern is None


def test_prompts_carry_the_contract_regimes_and_history_but_not_the_exact_shapes(kind, server, monkeypatch, tmp_path):
    from aka.agent.llm import prompts

    gdn = get_op("gdn_prefill")
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({"baseline": {"timing": "gpu", "incumbent_us": {"G6": 900.0}}}))
    failed = {"n": 0, "plan": {"hypothesis": "BV 128 for fewer programs"}, "failed_stage": "gate",
              "decision": {"promote": False, "verdict": "rejected",
                           "reason": "gate failed (S1 round 1): o: rel L2 3e-1 > 1e-2"}}
    ctx = Context(op="gdn_prefill", attempt=1, incumbent_source="# incumbent source\n", incumbent_label="baseline",
                  baseline_path="", kernel_dir="", hardware={"interpreter": True}, history=[failed], run_dir=str(d))
    system, plan = prompts.system_prompt(gdn, ctx, "triton"), prompts.plan_prompt(gdn, ctx, "triton")
    assert "exp(g_t)" in system and "tolerances" in system.lower() and "torch.empty" in system
    assert "full (10 cases" in system and "batch 1" not in system  # regimes as ranges
    assert "G6 (batch 2, medium, ragged up to medium; hk 16, hv 32, dim 128): 900.0 µs" in plan  # id, dimensions
    assert "gate failed (S1 round 1): o: rel L2 3e-1" in plan and "# incumbent source" in plan
    assert "[op-gdn-prefill]" in plan  # the op's wiki note
    assert "7168" not in system + plan  # G6's second length appears nowhere
    for exact in ("32768", "4x2048", "8192"):  # G4, G5, G1 (the wiki's cards may cite such figures)
        assert exact not in system


def test_plan_prompt_lists_the_evidence_the_loop_put_in_the_context(tmp_path):
    from aka.agent.llm import prompts

    gdn = get_op("gdn_prefill")
    item = {"id": "prof:spills:_fwd_kernel", "kind": "spills", "kernel": "_fwd_kernel",
            "text": "_fwd_kernel spills: 28 local words/thread at 255 registers"}
    ctx = Context(op="gdn_prefill", attempt=0, incumbent_source="# src\n", incumbent_label="baseline",
                  baseline_path="", kernel_dir="", hardware={"interpreter": True}, evidence=[item])
    assert "- [prof:spills:_fwd_kernel] _fwd_kernel spills: 28 local words" in prompts.plan_prompt(gdn, ctx, "triton")
    ctx.evidence = []
    assert "(no profile in this run" in prompts.evidence_text(ctx)


def test_shape_labels_give_every_dimension_but_the_lengths():
    """fa4_decode's q_len 1 and q_len 4 shapes looked the same to the planner (issue 19)."""
    from aka.agent.llm.prompts import regime

    fa4 = get_op("fa4_decode")
    by_id = {c.id: c for c in fa4.cases("full")}
    one, four = regime(by_id["D1-q1"], fa4.spec.case_params), regime(by_id["D1-q4"], fa4.spec.case_params)
    assert one != four and "q_len 1" in one and "q_len 4" in four
    assert regime(by_id["D1-q1"], fa4.spec.case_params) != regime(by_id["D2-q1"], fa4.spec.case_params)  # 8k, 32k
    assert "8192" not in one + four  # the lengths stay a count and a bucket
    gdn = get_op("gdn_prefill")
    g7 = next(c for c in gdn.cases("full") if c.id == "G7")
    assert regime(g7, gdn.spec.case_params) == "batch 8, medium, short each; hk 16, hv 32, initial state, dim 128"
