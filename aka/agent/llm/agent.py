"""Codegen with tools: the model edits, compiles, checks and times a working candidate, then submits it.

One attempt's codegen is a conversation: each model turn either calls tools (aka.agent.llm.tools answers
every call, errors included, and the conversation goes on) or answers in text, which is read as
before (edits or a whole module, against the working candidate) and verified, with repair turns.
It ends at ``submit``, at a text answer that verifies, or when a bound is reached: the per-attempt
cap on tool calls (a model that keeps calling past it is stopped after ``GRACE`` more calls) or
the run's token budget. Stopped with a changed working candidate, that candidate goes to the gate
as if submitted; unchanged, the attempt fails with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aka.agent.llm import prompts
from aka.agent.llm.answers import AnswerError, EditError, candidate_source
from aka.agent.llm.base import AttemptFailed, Context
from aka.agent.llm.tools import Session
from aka.agent.llm.wire import CUT_STOPS, Reply
from aka.records import Plan, Usage

GRACE = 4  # calls past the cap (each an error result) before the attempt is ended for the model


def codegen_with_tools(be, plan: Plan, ctx: Context) -> tuple[str, Usage]:
    """(candidate source, usage) of one attempt's codegen with tools; AttemptFailed when nothing usable came."""
    op, llm = be.op, be.llm
    root = Path(ctx.root) if ctx.root else op.root
    session = Session(op.name, root, ctx.incumbent_source, ctx.workbench, llm.max_tool_calls)
    system = prompts.system_prompt(op, ctx, llm.lang)
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompts.codegen_blocks(
        op, ctx, plan, llm.lang, tools=llm.max_tool_calls, gpu=not (ctx.hardware or {}).get("interpreter"))}]
    usage, stage, repairs, turn = Usage(), "codegen", 0, 0
    try:
        while True:
            if ctx.tokens_left is not None and usage.total >= ctx.tokens_left:
                return _stop(session, usage, "the run's token budget ran out during the tool calls")
            reply = be._ask(ctx, stage, system, messages, cache_tail=True)
            usage, turn = usage + reply.usage, turn + 1
            if reply.tool_calls:
                if ctx.notify:  # compile and check take seconds to minutes: say what runs
                    ctx.notify(llm=f"tools: {', '.join(c.name for c in reply.tool_calls)} "
                                   f"({len(session.records) + len(reply.tool_calls)}/{session.cap} calls)")
                messages += _tools_turn(session, reply, turn)
                if session.submitted is not None:
                    return session.working, usage
                if session.over_cap > GRACE:
                    return _stop(session, usage, f"{len(session.records)} tool calls, the cap is {session.cap}")
                stage = "tools"
                continue
            cut = " (the answer was cut at the output token limit)" if reply.stop_reason in CUT_STOPS else ""
            try:
                source, _ = candidate_source(reply.text, op.spec.entry, session.working)
            except EditError as exc:
                stage_failed, error = "edit", f"{exc}{cut}"
            except AnswerError as exc:  # prose after tool edits ("done"): the edits are the answer
                if session.changed:
                    return session.working, usage
                raise AttemptFailed("codegen", f"{exc}{cut}", usage) from None
            else:
                session.working = source
                stage_failed, error = ctx.verify(source) if ctx.verify else ("", "")
                if not stage_failed:
                    return source, usage
                if cut:
                    error += f"\n(answer cut at the output limit of {be.cfg.max_output_tokens} tokens: be shorter)"
            if repairs >= llm.repairs:
                if stage_failed == "edit":
                    raise AttemptFailed("codegen", error, usage)
                return session.working, usage  # the loop's own check and compile record the error
            repairs += 1
            if ctx.notify:
                ctx.notify(llm=f"repair {repairs}/{llm.repairs}: {stage_failed} failed")
            messages += [{"role": "assistant", "content": reply.text},
                         {"role": "user", "content": prompts.repair_text(stage_failed, error, repairs, llm.repairs)}]
            stage = "repair"
    finally:
        ctx.trace["tool_calls"] = [r.as_dict() for r in session.records]
        if session.submitted is not None:
            ctx.trace["submit_note"] = session.submitted[:300]


def _tools_turn(session: Session, reply: Reply, turn: int) -> list[dict[str, Any]]:
    """Run every call of one model turn; the turn's tokens are shared among its calls for the log."""
    first = len(session.records)
    results = []
    for c in reply.tool_calls:
        res = session.call(c.name, c.arguments, turn)
        results.append({"id": c.id, "name": c.name, "content": res.content, "is_error": res.is_error})
    mine = session.records[first:]
    for k, rec in enumerate(mine):
        rec.usage = _share(reply.usage, len(mine), k)
    return [{"role": "assistant", "content": reply.text, "tool_calls": [c.as_dict() for c in reply.tool_calls]},
            {"role": "tool", "results": results}]


def _share(u: Usage, parts: int, k: int) -> dict[str, Any]:
    """The k-th of `parts` shares of a turn's usage (integer tokens; the first share takes the remainders)."""
    def cut(x: int) -> int:
        return x // parts + (x % parts if k == 0 else 0)

    cost = None if u.cost_usd is None else round(u.cost_usd / parts, 6)
    return {"input_tokens": cut(u.input_tokens), "output_tokens": cut(u.output_tokens),
            "cached_tokens": cut(u.cached_tokens), "cache_write_tokens": cut(u.cache_write_tokens), "cost_usd": cost}


def _stop(session: Session, usage: Usage, why: str) -> tuple[str, Usage]:
    if session.changed:
        session.submitted = f"(ended by aka: {why})"
        return session.working, usage
    raise AttemptFailed("codegen", f"{why}, and the working candidate was never changed", usage)
