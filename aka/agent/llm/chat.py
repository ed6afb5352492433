"""The provider-agnostic LLM backend: plan with validation retries, codegen with a repair loop.

A provider file (anthropic.py, openai.py, replay.py) supplies only a Transport, one call that
turns a Request into a Reply with token usage; everything else happens here and imports no SDK:
prompts (aka.agent.llm.prompts), reading answers (aka.agent.llm.answers), the cost estimate, saving every
exchange to runs/<op>/<run>/llm/NNNN.json, parameter sweeps run by the offline search
(aka.agent.llm.sweep) when a plan asks for one, and codegen with tools (aka.agent.llm.agent).

Messages are provider-neutral dicts; each transport turns them into its wire format:
- ``{"role": "user", "content": str | [{"text": str, "cache": bool}, ...]}``: a block with
  ``cache`` ends a prefix that stays the same across calls (Anthropic: a cache breakpoint);
- ``{"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments"}]}``;
- ``{"role": "tool", "results": [{"id", "name", "content", "is_error"}], "content": str}``: the
  answers to the previous turn's tool calls, then optional text from aka.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aka.agent.llm import prompts, sweep
from aka.agent.llm.answers import AnswerError, EditError, candidate_source, parse_plan
from aka.agent.llm.base import AttemptFailed, Context, ProviderError
from aka.agent.llm.wire import CUT_STOPS, Reply, Request, Transport
from aka.config import LLMConfig, LLMSettings, load_config
from aka.errors import AkaError
from aka.records import Plan, Usage


class MissingSDKError(AkaError):
    """The provider's SDK is not installed (the llm extra is optional)."""


def optional_sdk(name: str):
    """A provider's SDK module, or None when it is not installed: the llm extra is optional and aka
    works offline without it (the transport says what to install when it is asked for)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def require_sdk(sdk, backend: str) -> None:
    if sdk is None:
        raise MissingSDKError(f"--backend {backend} needs the {backend} SDK: pip install 'aka[llm]'")


# the plan of an attempt whose plan answers were all tool calls (a server that ignores tool_choice none)
NO_PLAN = "(no plan: the model answered the plan request with tool calls; it writes the candidate with tools)"
_lock = threading.Lock()  # exchange numbering: a plan prepared ahead may overlap another call


def save_exchange(run_dir: str, req: Request, reply: Reply | None, seconds: float, provider: str,
                  error: str = "") -> Path | None:
    """runs/<op>/<run>/llm/NNNN.json: the request, the answer and its usage (what replay reads)."""
    if not run_dir:
        return None
    d = Path(run_dir) / "llm"
    with _lock:
        d.mkdir(exist_ok=True)
        n = len(list(d.glob("[0-9]*.json")))
        path = d / f"{n:04d}.json"
        body = {"n": n, "attempt": req.attempt, "stage": req.stage, "provider": provider,
                "request": {"system": req.system, "messages": req.messages, "max_tokens": req.max_tokens,
                            **({"tools": [t["name"] for t in req.tools]} if req.tools else {}),
                            **({"tool_choice": req.tool_choice} if req.tools and req.tool_choice != "auto" else {})},
                "response": None if reply is None else {"text": reply.text, "model": reply.model,
                                                        "stop_reason": reply.stop_reason, **reply.meta,
                                                        **({"tool_calls": [c.as_dict() for c in reply.tool_calls]}
                                                           if reply.tool_calls else {})},
                "usage": None if reply is None else reply.usage.model_dump(), "seconds": round(seconds, 3),
                "error": error}
        path.write_text(json.dumps(body, indent=1) + "\n")
    return path


def read_exchanges(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "llm").glob("[0-9]*.json"))]


class LLMBackend:
    """Backend protocol over any Transport (see aka.agent.llm.base.Backend)."""

    def __init__(self, name: str, transport: Transport, op, llm: LLMSettings, cfg: LLMConfig):
        self.name = name
        self.transport = transport
        self.op = op
        self.llm = llm
        self.cfg = cfg

    def probe(self) -> None:
        """Reach the endpoint once before the run's work starts (a transport without one: nothing to do)."""
        getattr(self.transport, "probe", lambda: None)()

    # -- one call ---------------------------------------------------------------------------
    def _cost(self, usage: Usage, model: str) -> Usage:
        if usage.cost_usd is not None:  # replay: the recorded estimate
            return usage
        price = self.cfg.price(model)
        if price is None:
            return usage
        cached_price = price.input if price.cached_input is None else price.cached_input
        write_price = price.input if price.cache_write is None else price.cache_write
        written = min(usage.cache_write_tokens, usage.uncached)
        fresh = usage.uncached - written
        cost = (fresh * price.input + written * write_price + usage.cached_tokens * cached_price
                + usage.output_tokens * price.output) / 1e6
        return usage.model_copy(update={"cost_usd": round(cost, 6)})

    def tool_definitions(self) -> list[dict[str, Any]]:
        """Sent on every call of a tools run, plan included: they lead the cached prefix, so a call
        without them would miss the cache of everything after them (the plan call sends them with
        tool_choice none, see plan())."""
        from aka.agent.llm.tools import definitions

        return definitions(self.op.name) if self.llm.tools else []

    def _ask(self, ctx: Context, stage: str, system: str, messages: list[dict[str, Any]],
             cache_tail: bool = False, tool_choice: str = "auto") -> Reply:
        req = Request(system, list(messages), ctx.attempt, stage, self.cfg.max_output_tokens,
                      self.tool_definitions(), cache_tail, tool_choice)
        received = [0]

        def on_text(chunk: str) -> None:  # streaming progress for the live display
            received[0] += len(chunk)
            if ctx.notify:
                ctx.notify(llm=f"{self.transport.model}: {stage}, {received[0]} chars received")

        t0 = time.monotonic()
        try:
            reply = self.transport.complete(req, on_text)
        except ProviderError as exc:
            save_exchange(ctx.run_dir, req, None, time.monotonic() - t0, self.transport.provider, str(exc))
            raise
        reply.usage = self._cost(reply.usage, reply.model or self.transport.model)
        save_exchange(ctx.run_dir, req, reply, time.monotonic() - t0, self.transport.provider)
        ctx.trace.setdefault("llm_calls", []).append(
            {"stage": stage, **reply.usage.model_dump(), "tool_calls": [c.name for c in reply.tool_calls]})
        if ctx.notify:
            u = reply.usage
            ctx.notify(llm=f"{reply.model}: {stage} done, {u.input_tokens} in / {u.output_tokens} out tokens",
                       call_tokens=u.total, call_cost=u.cost_usd)
        return reply

    # -- the Backend protocol ---------------------------------------------------------------
    def plan(self, ctx: Context) -> tuple[Plan, Usage]:
        planned = sweep.sweep_plan(ctx, self.llm.sweep)
        if planned is not None:  # the offline search runs the last plan's parameter ranges first
            return planned, Usage()
        system = prompts.system_prompt(self.op, ctx, self.llm.lang)
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompts.plan_blocks(self.op, ctx, self.llm.lang)}]
        # Tools only where usable: the plan call sends the same tool definitions as codegen with
        # tool_choice "none", rather than a read-only subset. The definitions lead the cached prefix
        # (Anthropic: tools -> system -> messages; OpenAI's automatic prefix), so a subset would miss
        # the cache of everything after it on every plan call; tool_choice none keeps them
        # byte-identical, and no model can lose a plan answer to a tool call. Anthropic caches the
        # messages per tool_choice, so plan and codegen calls each read their own copy of the
        # incumbent block (one more cache write per incumbent); tools and system are shared. A server
        # that ignores tool_choice is handled below: its calls are answered, never the attempt's end.
        usage, session = Usage(), None
        for i in range(self.llm.plan_retries + 1):
            reply = self._ask(ctx, "plan" if i == 0 else "plan-retry", system, messages, tool_choice="none")
            usage = usage + reply.usage
            try:  # a plan in the text stands, whatever tool calls came with it
                return parse_plan(reply.text), usage
            except AnswerError as exc:
                cut = " (the answer was cut at the output token limit)" if reply.stop_reason in CUT_STOPS else ""
                why = f"{exc}{cut}"
            if reply.tool_calls:  # a server that ignores tool_choice: every call gets a useful answer
                from aka.agent.llm.tools import Session

                root = Path(ctx.root) if ctx.root else self.op.root
                session = session or Session(self.op.name, root, ctx.incumbent_source, None, 10**6)
                why = ("it called tools and gave no plan JSON (the calls are answered above: read_file works "
                       "while planning, the other tools work on the candidate you write in the next step)")
            messages += answer_turn(reply, why, prompts.template("plan_retry", error=why), session)
        if reply.tool_calls and self.llm.tools:  # calling an offered tool never fails the attempt: on to codegen
            return Plan(hypothesis=NO_PLAN), usage
        raise AttemptFailed("plan", f"no valid plan after {self.llm.plan_retries + 1} answers: {why}", usage)

    def candidate(self, plan: Plan, ctx: Context) -> tuple[str, Usage]:
        if sweep.is_sweep(plan):
            return sweep.render_point(plan, ctx), Usage()
        if self.llm.tools:
            from aka.agent.llm.agent import codegen_with_tools

            return codegen_with_tools(self, plan, ctx)
        entry = self.op.spec.entry
        system = prompts.system_prompt(self.op, ctx, self.llm.lang)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": prompts.codegen_blocks(self.op, ctx, plan, self.llm.lang)}]
        usage = Usage()
        current = ctx.incumbent_source  # what edits apply to: the incumbent, then the last candidate
        source = current
        for i in range(self.llm.repairs + 1):
            reply = self._ask(ctx, "codegen" if i == 0 else "repair", system, messages)
            usage = usage + reply.usage
            cut = " (the answer was cut at the output token limit)" if reply.stop_reason in CUT_STOPS else ""
            try:
                source, _ = candidate_source(reply.text, entry, current)
            except EditError as exc:  # the model can fix its own SEARCH text: a repair turn
                if i == self.llm.repairs:
                    raise AttemptFailed("codegen", f"{exc}{cut}", usage) from None
                stage, error = "edit", f"{exc}{cut}"
            except AnswerError as exc:  # prose, empty, another op's code: no repair can help
                raise AttemptFailed("codegen", f"{exc}{cut}", usage) from None
            else:
                current = source
                if ctx.verify is None or i == self.llm.repairs:
                    return source, usage  # the loop's own check and compile record any error left
                stage, error = ctx.verify(source)
                if not stage:
                    return source, usage
                if cut:
                    error += f"\n(answer cut at the output limit of {self.cfg.max_output_tokens} tokens: be shorter)"
            if ctx.notify:
                ctx.notify(llm=f"repair {i + 1}/{self.llm.repairs}: {stage} failed")
            messages += answer_turn(reply, "", prompts.repair_text(stage, error, i + 1, self.llm.repairs))
        return source, usage


def backend_maker(provider: str, transport: Callable[[LLMConfig, LLMSettings], Transport]):
    """A provider module's make_backend(**options): checks the SDK and the key now, before any work."""

    def make_backend(op=None, llm: LLMSettings | None = None, config: LLMConfig | None = None,
                     **_: Any) -> LLMBackend:
        cfg = config or load_config()
        llm = llm or LLMSettings()
        return LLMBackend(provider, transport(cfg, llm), op, llm, cfg)

    return make_backend


def answer_turn(reply: Reply, why: str, then: str, session: Any = None) -> list[dict[str, Any]]:
    """The model's answer and aka's next message. Tool calls in an answer that is not a tools turn
    are answered before the text (every provider wants each call answered): with a plan step's
    Session (aka.agent.llm.tools.Session.before_candidate), read_file for real and the other tools
    with what they are for; without one, with an error."""
    turn: dict[str, Any] = {"role": "assistant", "content": reply.text or ("" if reply.tool_calls else "(empty)")}
    if not reply.tool_calls:
        return [turn, {"role": "user", "content": then}]
    turn["tool_calls"] = [c.as_dict() for c in reply.tool_calls]
    results = []
    for c in reply.tool_calls:
        if session is not None:
            res = session.before_candidate(c.name, c.arguments)
            content, is_error = res.content, res.is_error
        else:
            content, is_error = f"error: {why or 'no tools in this step'}", True
        results.append({"id": c.id, "name": c.name, "content": content, "is_error": is_error})
    return [turn, {"role": "tool", "results": results, "content": then}]
