"""A deterministic backend for tests: plays a fixed list of (plan, source) steps.

Steps come from Python (tests) or from a JSON file (a subprocess driving the loop). Step i is
used for attempt i, so a killed and resumed run replays exactly the same candidates; when the
steps run out the backend reports exhaustion and the run ends normally.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aka.agent.llm.base import AttemptFailed, BackendExhausted, Context
from aka.records import Plan, Usage


class ScriptedBackend:
    name = "scripted"

    def __init__(self, steps: list[dict[str, Any]] | None = None, path: str | None = None, tokens: int = 0):
        if steps is None:
            if path is None:
                raise ValueError("scripted backend needs steps=[...] or path=FILE.json")
            steps = json.loads(Path(path).read_text())
        self.steps = steps
        self.tokens = tokens

    def _step(self, ctx: Context) -> dict[str, Any]:
        if ctx.attempt >= len(self.steps):
            raise BackendExhausted(f"scripted backend has only {len(self.steps)} steps")
        return self.steps[ctx.attempt]

    def plan(self, ctx: Context) -> tuple[Plan, Usage]:
        step = self._step(ctx)
        if step.get("fail"):  # an unusable answer, as an LLM backend reports one
            raise AttemptFailed(step["fail"], "scripted unusable answer", Usage(input_tokens=self.tokens))
        plan = Plan.model_validate(step.get("plan") or {"hypothesis": f"scripted step {ctx.attempt}"})
        return plan, Usage(input_tokens=self.tokens, output_tokens=self.tokens // 2)

    def candidate(self, plan: Plan, ctx: Context) -> tuple[str, Usage]:
        step = self._step(ctx)
        source = step["source"] if "source" in step else Path(step["source_file"]).read_text()
        return source, Usage(output_tokens=self.tokens // 2)


def make_backend(**options: Any) -> ScriptedBackend:
    return ScriptedBackend(**options)
