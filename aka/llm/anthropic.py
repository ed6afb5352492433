"""Anthropic Messages API backend; the only module that imports the anthropic SDK.

Retries with backoff on 429/5xx/timeouts are the SDK's own (max_retries, honouring retry-after);
each call has the config's timeout. Answers stream so the live display shows progress. The
system prompt (contract, policy, shapes, hardware) is the same for every call of a run, so it is
marked for prompt caching: later calls read it at the cached-input price.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aka.config import LLMConfig, LLMSettings, api_key, load_config
from aka.llm import endpoint
from aka.llm.base import Usage
from aka.llm.chat import LLMBackend, MissingSDKError, Reply, Request

try:
    import anthropic
except ImportError:  # the llm extra is optional: aka works offline without it
    anthropic = None  # type: ignore[assignment]


class AnthropicTransport:
    provider = "anthropic"

    def __init__(self, cfg: LLMConfig, llm: LLMSettings):
        if anthropic is None:
            raise MissingSDKError("--backend anthropic needs the anthropic SDK: pip install 'aka[llm]'")
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
            model=self.model, max_tokens=req.max_tokens, messages=req.messages,
            system=[{"type": "text", "text": req.system, "cache_control": {"type": "ephemeral"}}],
        )
        def ask() -> Any:
            if not self.stream:
                return self.client.messages.create(**args)
            with self.client.messages.stream(**args) as stream:
                for text in stream.text_stream:
                    if on_text:
                        on_text(text)
                return stream.get_final_message()

        msg = endpoint.call("anthropic", anthropic, self.base_url, ask, _message)
        text = "".join(getattr(b, "text", "") for b in msg.content if getattr(b, "type", "") == "text")
        u = msg.usage
        cached = u.cache_read_input_tokens or 0
        usage = Usage(input_tokens=u.input_tokens + cached + (u.cache_creation_input_tokens or 0),
                      output_tokens=u.output_tokens, cached_tokens=cached)
        return Reply(text, usage, msg.model or self.model, msg.stop_reason or "", {"id": msg.id})


def _message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(exc)[:300]


def make_backend(op=None, llm: LLMSettings | None = None, config: LLMConfig | None = None, **_: Any) -> LLMBackend:
    """Checks the SDK and the key now, before any work starts."""
    cfg = config or load_config()
    llm = llm or LLMSettings()
    return LLMBackend("anthropic", AnthropicTransport(cfg, llm), op, llm, cfg)
