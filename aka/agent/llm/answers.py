"""Reading a model's answer: the plan JSON and the candidate module, each with a one-line reason when unusable.

The reasons are what the attempts log and the repair/retry prompts carry, so they name what was
wrong in the model's terms ("no ```json block", "defines no function 'gdn_prefill'").
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aka.agent.llm.edits import EditError, apply_edits, parse_edits
from aka.errors import AkaError
from aka.records import Plan

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


class AnswerError(AkaError):
    """An answer that is not what aka asked for; the message says why, in one line."""


class PlanAnswer(BaseModel):
    """The fields a model may set; aka-owned fields (pattern) are not the model's to choose."""

    model_config = ConfigDict(extra="forbid")
    hypothesis: str = Field(min_length=1)
    structural_change: str = ""
    expected_effect: dict[str, str] = Field(default_factory=dict)
    risks: list[str] = Field(default_factory=list)
    param_ranges: dict[str, list[Any]] = Field(default_factory=dict)
    avoided: list[str] = Field(default_factory=list)
    cited_wiki: list[str] = Field(default_factory=list)
    cited_evidence: list[str] = Field(default_factory=list)


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(lang.lower(), body) for lang, body in _FENCE.findall(text)]


def _json_object(text: str) -> Any:
    """The first ```json block, else the outermost {...} span of the answer."""
    for lang, body in _blocks(text):
        if lang in ("json", ""):
            try:
                return json.loads(body)
            except json.JSONDecodeError as exc:
                raise AnswerError(f"the ```json block is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise AnswerError("the answer contains no JSON object (expected one ```json block)")
    try:
        return json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise AnswerError(f"the answer's JSON object is not valid JSON: {exc.msg}") from None


def parse_plan(text: str) -> Plan:
    """The answer as a Plan, or AnswerError with the validation problem (fed back to the model)."""
    if not text.strip():
        raise AnswerError("the answer is empty")
    raw = _json_object(text)
    if not isinstance(raw, dict):
        raise AnswerError(f"expected a JSON object, got {type(raw).__name__}")
    try:
        ans = PlanAnswer.model_validate(raw)
    except ValidationError as exc:
        probs = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'object'}: {e['msg']}" for e in exc.errors()[:4])
        raise AnswerError(f"the plan does not validate: {probs}") from None
    return Plan(**ans.model_dump())


def _defined(source: str) -> set[str] | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def extract_code(text: str, entry: str) -> str:
    """The candidate module from an answer: the python block defining `entry` (largest if several).

    A block with a syntax error is still returned when it mentions `def entry(`: the compile stage
    reports the error and the repair loop feeds it back. Prose, an empty answer or code for
    another op raise AnswerError: those fail the attempt, no repair would help.
    """
    if not text.strip():
        raise AnswerError("the answer is empty")
    blocks = [body for lang, body in _blocks(text) if lang in ("python", "py", "")]
    if not blocks and _defined(text):
        blocks = [text]  # a bare module without fences
    if not blocks:
        raise AnswerError("the answer contains no ```python block (prose only)")
    mine = [b for b in blocks if entry in (_defined(b) or set()) or re.search(rf"^def {re.escape(entry)}\(", b, re.M)]
    if not mine:
        others = sorted(set().union(*[(_defined(b) or set()) for b in blocks]) - {"_"})
        seen = f" (it defines {', '.join(others[:5])}: code for another op?)" if others else ""
        raise AnswerError(f"the code defines no function '{entry}'{seen}")
    return max(mine, key=len).rstrip() + "\n"


def candidate_source(text: str, entry: str, current: str) -> tuple[str, int]:
    """The candidate an answer describes, and how many edits it used (0: a whole module).

    Edits apply to ``current`` (the incumbent on codegen, the last candidate on a repair); an edit
    that does not apply raises EditError (repairable: the model sees why). Without edit blocks the
    answer is read as a whole module (extract_code)."""
    if not text.strip():
        raise AnswerError("the answer is empty")
    edits = parse_edits(text)
    if not edits:
        return extract_code(text, entry), 0
    return apply_edits(current, edits), len(edits)


__all__ = ["AnswerError", "EditError", "PlanAnswer", "candidate_source", "extract_code", "parse_plan"]
