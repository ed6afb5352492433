"""The Backend protocol, token usage, the context a backend sees, and the lazy backend registry.

A backend is one module exposing ``make_backend(**options) -> Backend``; the registry maps a
name to that module's dotted path and imports it only when asked, so the offline default never
imports an SDK and an LLM provider is one new file plus one entry here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from aka.errors import AkaError
from aka.records import Attempt, Plan, Usage

__all__ = ["LLM_BACKENDS", "AttemptFailed", "Backend", "BackendExhausted", "Context", "ProviderError",
           "UnknownBackendError", "get_backend"]


class UnknownBackendError(AkaError):
    """A --backend name that is not registered."""


class BackendExhausted(AkaError):
    """The backend has nothing new to propose: the run ends normally."""


class ProviderError(AkaError):
    """The provider failed after its retries (network, auth, bad request): the endpoint's fault, not a
    candidate's. The loop stops the run and records it; `resumable` says whether resuming the run
    can help (a dead server or a bad key, once fixed: yes; a request the server rejects: no), `fix`
    what to do first."""

    def __init__(self, message: str, resumable: bool = True, fix: str = ""):
        super().__init__(message)
        self.resumable, self.fix = resumable, fix

    def record(self) -> dict[str, Any]:
        return {"kind": "endpoint", "error": str(self), "resumable": self.resumable, "fix": self.fix}


class AttemptFailed(AkaError):
    """This attempt's answer was unusable (prose, empty, code for another op, a plan that never
    validated): the loop records the stage and reason, counts the tokens, and goes on."""

    def __init__(self, stage: str, reason: str, usage: Usage | None = None):
        super().__init__(reason)
        self.stage = stage
        self.usage = usage or Usage()


@dataclass
class Context:
    """What a backend may know when it plans: never the exact evaluation shapes' data, only facts.

    ``history`` holds one Attempt per finished attempt of this run (the attempts.jsonl records), so
    a backend that derives its state from it resumes exactly where a killed run stopped.
    """

    op: str
    attempt: int  # index of the attempt being planned (0-based)
    incumbent_source: str
    incumbent_label: str  # "baseline" or "promoted" or "candidate N"
    baseline_path: str
    kernel_dir: str
    hardware: dict[str, Any] = field(default_factory=dict)
    history: list[Attempt] = field(default_factory=list)
    pending: list[Attempt] = field(default_factory=list)  # planned, not yet measured (pipelining)
    incumbent_score: float = 1.0  # the incumbent's geomean speedup over the baseline (same scale as scores)
    seed: int = 0
    # aka.knowledge.evidence.Evidence dicts about the incumbent (profile on its worst-roofline shape, compile
    # stats): prompts list them, the offline planner steers by them; plans cite their ids
    evidence: list[dict[str, Any]] = field(default_factory=list)
    root: str = ""  # project root: wiki/ is read from here ('' : no wiki, plans cite no cards)
    # LLM backends: where exchanges are saved, a check+compile of a draft ('' or the error) for the
    # repair loop, and a hook to the live display (tokens, streaming progress). All optional.
    run_dir: str = ""
    verify: Callable[[str], tuple[str, str]] | None = None  # source -> (failed stage, error); ("", "") ok
    notify: Callable[..., None] | None = None
    # what the loop lends codegen's tools (aka.agent.llm.tools.Workbench: compile, check, time, profile of a
    # draft); None: those tools answer that they are not available here
    workbench: Any = None
    tokens_left: int | None = None  # the run's token budget left when this attempt began (None: no limit)
    lessons: list[str] = field(default_factory=list)  # the op's top lessons from earlier runs (aka.knowledge.lessons)
    # filled by the backend for the attempts log: per LLM call its usage, per tool call its record
    trace: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # a caller may hand over the log's JSON objects (a replay, a test): typed here, once
        self.history = [a if isinstance(a, Attempt) else Attempt.model_validate(a) for a in self.history]
        self.pending = [a if isinstance(a, Attempt) else Attempt.model_validate(a) for a in self.pending]


@runtime_checkable
class Backend(Protocol):
    name: str

    def plan(self, context: Context) -> tuple[Plan, Usage]: ...

    def candidate(self, plan: Plan, context: Context) -> tuple[str, Usage]: ...


# name -> module with make_backend(**options)
REGISTRY: dict[str, str] = {
    "offline": "aka.agent.llm.offline",
    "scripted": "aka.agent.llm.scripted",
    "anthropic": "aka.agent.llm.anthropic",
    "openai": "aka.agent.llm.openai",
    "replay": "aka.agent.llm.replay",
}
LLM_BACKENDS = ("anthropic", "openai", "replay")  # make_backend(op=..., llm=LLMSettings) for these


def get_backend(name: str, **options: Any) -> Backend:
    """Import the named backend lazily and build it; unknown names fail with the known ones listed."""
    path = REGISTRY.get(name)
    if path is None:
        raise UnknownBackendError(f"unknown backend '{name}'; choose one of: {', '.join(sorted(REGISTRY))}")
    return importlib.import_module(path).make_backend(**options)
