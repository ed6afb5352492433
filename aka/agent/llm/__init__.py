"""Backends that plan and write candidates: offline (no API key: the pattern library and a constrained
search), anthropic and openai (one SDK a file; an OpenAI-compatible endpoint through openai), replay
(a recorded run's answers) and scripted (tests)."""

from aka.agent.llm.base import Backend, Context, get_backend
from aka.records import Usage

__all__ = ["Backend", "Context", "Usage", "get_backend"]
