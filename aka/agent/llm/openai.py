"""OpenAI Chat Completions backend, also for any OpenAI-compatible server; the only module that imports openai.

--base-url points it at vLLM, SGLang, Ollama or LM Studio (…/v1), so a team with a local model
needs no cloud account; a local endpoint needs no key, and without --model the server's only
model is used. Retries with backoff on 429/5xx/timeouts are the SDK's (max_retries, retry-after).

Tools go as chat-completions ``tools`` (type function) and come back as ``tool_calls`` (streamed:
in pieces by index), the format vLLM and SGLang speak too; a server started without a tool parser
refuses them, which the error says with the fix (--no-tools). The plan call sends the same tools
with ``tool_choice: "none"``; a server that ignores it and calls them anyway is answered (chat.py).
Caching is the provider's own automatic prefix caching: the prompts put what stays the same first,
so it can apply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aka.agent.llm import endpoint
from aka.agent.llm.base import ProviderError
from aka.agent.llm.chat import backend_maker, optional_sdk, require_sdk
from aka.agent.llm.wire import Reply, Request, ToolCall, flat
from aka.config import LLMConfig, LLMSettings, api_key
from aka.records import Usage

openai = optional_sdk("openai")  # this file's one SDK (None: the llm extra is not installed)


class OpenAITransport:
    provider = "openai"

    def __init__(self, cfg: LLMConfig, llm: LLMSettings):
        require_sdk(openai, "openai")
        self.base_url = llm.base_url or cfg.openai.base_url
        self.stream = cfg.stream
        self.client = openai.OpenAI(api_key=api_key("openai", cfg, self.base_url), base_url=self.base_url,
                                    timeout=cfg.timeout_s, max_retries=cfg.max_retries)
        self._probed = False
        self.model = llm.model or cfg.openai.model if not self.base_url else llm.model or self._served_model(cfg)

    def probe(self) -> None:
        """One cheap request before any work: a dead server or a rejected key fails now, in one line."""
        if not self._probed:
            endpoint.probe("openai", openai, self.client, self.base_url)
            self._probed = True

    def _served_model(self, cfg: LLMConfig) -> str:
        """A compatible server usually serves one model: use it rather than a cloud model name."""
        ids = endpoint.probe("openai", openai, self.client, self.base_url)  # unreachable: says so, not "--model"
        self._probed = True
        if ids is None:
            raise ProviderError(f"{self.base_url} does not list its models: give --model NAME")
        if len(ids) == 1:
            return ids[0]
        if cfg.openai.model in ids:
            return cfg.openai.model
        raise ProviderError(f"{self.base_url} serves {len(ids)} models ({', '.join(ids[:6])}): pick one with --model")

    def complete(self, req: Request, on_text: Callable[[str], None] | None = None) -> Reply:
        # The cloud API wants max_completion_tokens; compatible servers widely accept only max_tokens.
        limit = {"max_tokens" if self.base_url else "max_completion_tokens": req.max_tokens}
        args: dict[str, Any] = dict(model=self.model, messages=[{"role": "system", "content": req.system},
                                                                *wire_messages(req.messages)], **limit)
        if req.tools:
            args["tools"] = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                               "parameters": t["parameters"]}} for t in req.tools]
            if req.tool_choice == "none":  # the plan: the same tools (the cached prefix), none callable
                args["tool_choice"] = "none"
        if self.stream:
            return endpoint.call("openai", openai, self.base_url, lambda: self._streamed(args, on_text))
        resp = endpoint.call("openai", openai, self.base_url, lambda: self.client.chat.completions.create(**args))
        choice = resp.choices[0] if resp.choices else None
        text = (choice.message.content or "") if choice else ""
        calls = [ToolCall(c.id, c.function.name, c.function.arguments or "")
                 for c in ((choice.message.tool_calls or []) if choice else []) if getattr(c, "function", None)]
        return Reply(text, _usage(resp.usage), resp.model or self.model, (choice.finish_reason or "") if choice else "",
                     {"id": resp.id}, calls)

    def _streamed(self, args: dict[str, Any], on_text: Callable[[str], None] | None) -> Reply:
        parts, finish, usage, model, rid = [], "", None, self.model, ""
        calls: dict[int, dict[str, str]] = {}  # index -> id, name, arguments so far
        stream = self.client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            model, rid = chunk.model or model, chunk.id or rid
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices or []:
                delta = choice.delta.content if choice.delta else None
                if delta:
                    parts.append(delta)
                    if on_text:
                        on_text(delta)
                for tc in (choice.delta.tool_calls if choice.delta else None) or []:
                    c = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    c["id"] = tc.id or c["id"]
                    if tc.function is not None:
                        c["name"] = tc.function.name or c["name"]
                        c["arguments"] += tc.function.arguments or ""
                finish = choice.finish_reason or finish
        tool_calls = [ToolCall(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
        return Reply("".join(parts), _usage(usage), model, finish, {"id": rid}, tool_calls)


def wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """aka's provider-neutral messages (aka.agent.llm.chat) as chat-completions messages."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content") or None}
            if m.get("tool_calls"):
                msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"], "arguments": c["arguments"]}}
                                     for c in m["tool_calls"]]
            elif msg["content"] is None:
                msg["content"] = "(empty)"
            out.append(msg)
            continue
        out += [{"role": "tool", "tool_call_id": r["id"], "content": r["content"]} for r in m.get("results") or []]
        if m.get("content"):
            out.append({"role": "user", "content": flat(m["content"])})
    return out


def _usage(u: Any) -> Usage:
    if u is None:  # a server that does not report usage: zero, not a guess
        return Usage()
    details = getattr(u, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
    return Usage(input_tokens=u.prompt_tokens or 0, output_tokens=u.completion_tokens or 0, cached_tokens=cached)


make_backend = backend_maker("openai", OpenAITransport)
