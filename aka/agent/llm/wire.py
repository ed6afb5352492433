"""What crosses between aka and a provider's SDK module (aka.agent.llm.anthropic, .openai, .replay):
the provider-neutral request, the reply with its usage and tool calls, and the protocol a transport
implements. aka.agent.llm.chat drives the conversation (its docstring gives the neutral message
shapes); aka.agent.llm.agent the tool turns. Both import these types from here, so neither imports
the other at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aka.records import Usage


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text as the model wrote it (an OpenAI-compatible server may pass on broken JSON)

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass
class Request:
    system: str
    messages: list[dict[str, Any]]  # provider-neutral (see the module docstring)
    attempt: int
    stage: str  # plan, plan-retry, codegen, tools, repair
    max_tokens: int
    tools: list[dict[str, Any]] = field(default_factory=list)  # [{"name", "description", "parameters"}]
    # the conversation goes on (tool turns, repairs): mark its end as a cache breakpoint too
    cache_tail: bool = False
    # "auto": the model may call the tools; "none": they are sent (the cached prefix) but may not be called
    tool_choice: str = "auto"


@dataclass
class Reply:
    text: str
    usage: Usage
    model: str
    stop_reason: str = ""  # provider's words; "max_tokens" / "length" mean the answer was cut
    meta: dict[str, Any] = field(default_factory=dict)
    tool_calls: list[ToolCall] = field(default_factory=list)


def blocks(content: str | list[dict[str, Any]] | None) -> list[tuple[str, bool]]:
    """A neutral message's content as (text, cache) blocks."""
    if not content:
        return []
    if isinstance(content, str):
        return [(content, False)]
    return [(b["text"], bool(b.get("cache"))) for b in content]


def flat(content: str | list[dict[str, Any]] | None) -> str:
    """A neutral message's content as one string (providers without explicit cache blocks)."""
    return "\n\n".join(t for t, _ in blocks(content))


class Transport(Protocol):
    provider: str
    model: str

    def complete(self, req: Request, on_text: Callable[[str], None] | None = None) -> Reply: ...



CUT_STOPS = ("max_tokens", "length")  # stop reasons of an answer cut at the output token limit (Anthropic, OpenAI)
