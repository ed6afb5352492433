"""The Plan: what one round intends to try, and why. Produced by every backend (offline or LLM).

The offline backend fills it from its search; an LLM backend parses its answer into the same model,
so the attempts log and the display never care which backend planned.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Plan(BaseModel):
    """One round's intent: a hypothesis, the structural change, and the parameters to try."""

    model_config = ConfigDict(extra="forbid")

    hypothesis: str = Field(description="why the change should be faster, in one or two sentences")
    structural_change: str = Field("", description="the structural change (empty: parameters only)")
    expected_effect: dict[str, str] = Field(
        default_factory=dict, description="expected effect per regime, e.g. {'batch 1, long': '-20%'}"
    )
    risks: list[str] = Field(default_factory=list, description="what could go wrong (correctness, spills)")
    param_ranges: dict[str, list[Any]] = Field(
        default_factory=dict, description="parameter -> values to try (one value: a fixed choice)"
    )
    avoided: list[str] = Field(default_factory=list, description="regions or ideas deliberately avoided, why")
    pattern: str | None = Field(None, description="pattern template the plan builds on, if any")
    cited_wiki: list[str] = Field(default_factory=list, description="wiki card ids the plan relies on")
    cited_evidence: list[str] = Field(default_factory=list, description="measurements the plan relies on")

    def fixed_config(self) -> dict[str, Any]:
        """Parameters with exactly one value: the concrete configuration this plan asks for."""
        return {k: v[0] for k, v in self.param_ranges.items() if len(v) == 1}

    def summary(self) -> str:
        head = f"[{self.pattern}] " if self.pattern else ""
        return head + (self.structural_change or self.hypothesis)
