"""Backends that plan and write candidates: offline (embedded default), scripted (tests), LLMs later."""

from aka.agent.llm.base import Backend, Context, Usage, get_backend

__all__ = ["Backend", "Context", "Usage", "get_backend"]
