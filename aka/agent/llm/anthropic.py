"""Anthropic Messages API backend; the only module that imports the anthropic SDK.

Retries with backoff on 429/5xx/timeouts are the SDK's own (max_retries, honouring retry-after);
each call has the config's timeout. Answers stream so the live display shows progress.

Caching: the system prompt (contract, policy, shapes, hardware) and each user block the prompts mark
``cache`` (the incumbent block) end with a cache breakpoint, and a conversation that goes on (tool
turns, repairs) gets one on its last block too: at most three of the API's four. A prefix is cached
only from 1,024 tokens on (Sonnet, Opus; Haiku 2,048): the system prompt of a small op alone may be
shorter, the prefix ending after the incumbent never is. Tools come first in the cached prefix, so
a tools run sends the same definitions on every call, plan included; the plan call adds
``tool_choice: {"type": "none"}``, which keeps the cached tools and system (the API caches the
messages per tool_choice, so plan and codegen calls each keep their own copy of the incumbent block).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aka.agent.llm import endpoint
from aka.agent.llm.chat import backend_maker, optional_sdk, require_sdk
from aka.agent.llm.wire import Reply, Request, ToolCall, blocks
from aka.config import LLMConfig, LLMSettings, api_key
from aka.records import Usage

anthropic = optional_sdk("anthropic")  # this file's one SDK (None: the llm extra is not installed)


class AnthropicTransport:
    provider = "anthropic"

    def __init__(self, cfg: LLMConfig, llm: LLMSettings):
        require_sdk(anthropic, "anthropic")
        base_url = llm.base_url or cfg.anthropic.base_url
        self.model = llm.model or cfg.anthropic.model or "claude-sonnet-4-6"
        self.stream = cfg.stream
        self.base_url = base_url
        self.client = anthropic.Anthropic(api_key=api_key("anthropic", cfg, base_url), base_url=base_url,
                                          timeout=cfg.timeout_s, max_retries=cfg.max_retries)

    def probe(self) -> None:
        """One cheap request before any work: a dead endpoint or a rejected key fails now, in one line."""
        endpoint.probe("anthropic", anthropic, self.client, self.base_url)

    def complete(self, req: Request, on_text: Callable[[str], None] | None = None) -> Reply:
        args: dict[str, Any] = dict(
            model=self.model, max_tokens=req.max_tokens, messages=wire_messages(req.messages, req.cache_tail),
            system=[{"type": "text", "text": req.system, "cache_control": _EPHEMERAL}],
        )
        if req.tools:
            args["tools"] = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                             for t in req.tools]
            if req.tool_choice == "none":  # the plan: the same tools (the cached prefix), none callable
                args["tool_choice"] = {"type": "none"}
        def ask() -> Any:
            if not self.stream:
                return self.client.messages.create(**args)
            with self.client.messages.stream(**args) as stream:
                for text in stream.text_stream:
                    if on_text:
                        on_text(text)
                return stream.get_final_message()

        msg = endpoint.call("anthropic", anthropic, self.base_url, ask)
        text = "".join(getattr(b, "text", "") for b in msg.content if getattr(b, "type", "") == "text")
        calls = [ToolCall(b.id, b.name, json.dumps(b.input)) for b in msg.content
                 if getattr(b, "type", "") == "tool_use"]
        u = msg.usage
        cached, written = u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
        usage = Usage(input_tokens=u.input_tokens + cached + written, output_tokens=u.output_tokens,
                      cached_tokens=cached, cache_write_tokens=written)
        return Reply(text, usage, msg.model or self.model, msg.stop_reason or "", {"id": msg.id}, calls)


_EPHEMERAL = {"type": "ephemeral"}


def _text(text: str, cache: bool = False) -> dict[str, Any]:
    return {"type": "text", "text": text, **({"cache_control": _EPHEMERAL} if cache else {})}


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def wire_messages(messages: list[dict[str, Any]], cache_tail: bool) -> list[dict[str, Any]]:
    """aka's provider-neutral messages (aka.agent.llm.chat) as Messages API content blocks."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant":
            content = [_text(m["content"])] if m.get("content") else []
            content += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": _input(c["arguments"])}
                        for c in m.get("tool_calls") or []]
            out.append({"role": "assistant", "content": content or [_text("(empty)")]})
            continue
        content = [{"type": "tool_result", "tool_use_id": r["id"], "content": r["content"],
                    **({"is_error": True} if r.get("is_error") else {})} for r in m.get("results") or []]
        content += [_text(t, c) for t, c in blocks(m.get("content"))]
        out.append({"role": "user", "content": content})
    if cache_tail and out and out[-1]["role"] == "user" and out[-1]["content"]:
        out[-1]["content"][-1]["cache_control"] = _EPHEMERAL
    return out


make_backend = backend_maker("anthropic", AnthropicTransport)
