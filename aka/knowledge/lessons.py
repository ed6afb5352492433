"""Lessons: what a run learned, as structured records, and card drafts proposed from them.

The attempts log (runs/<op>/<run-id>/attempts.jsonl) is written by the loop; this module only
reads it, through aka.records' typed Attempt (unknown fields kept, missing ones at their defaults).
Nothing here writes into wiki/: drafts go to stdout or a folder the user names.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aka.errors import AkaError
from aka.records import Attempt, AttemptLogError, read_attempt_log


class LessonError(AkaError):
    """A run folder or attempts log that cannot be read."""


@dataclass(frozen=True)
class AttemptView:
    """The few things lessons and stats need from one attempts.jsonl record."""

    attempt: int
    summary: str
    cited_wiki: list[str]
    passed_gate: bool | None  # None: the record does not say
    promoted: bool
    reason: str
    measurements: dict[str, float] = field(default_factory=dict)


def _numbers(d: dict[str, Any], prefix: str) -> dict[str, float]:
    return {f"{prefix}{k}": float(v) for k, v in d.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def _gate_passed(rec: Attempt) -> bool | None:
    """gate.passed is {shape: [bool per round]}; None when the record holds no gate verdict."""
    if rec.failed_stage in ("check", "compile", "gate", "duplicate"):
        return False
    if rec.gate and rec.gate.passed:
        return not rec.gate.error and all(all(r) for r in rec.gate.passed.values())
    return None


def view(rec: Attempt, index: int) -> AttemptView:
    plan = rec.plan
    promoted = rec.promoted
    passed = True if promoted else _gate_passed(rec)  # promotion implies the gate passed
    reason = (rec.decision.reason if rec.decision else "") or (rec.gate.error if rec.gate else "")
    if rec.failed_stage and rec.failed_stage not in reason:
        reason = f"{rec.failed_stage} stage: {reason}" if reason else f"failed at the {rec.failed_stage} stage"
    summary = (plan.structural_change or plan.hypothesis) if plan else ""
    if plan and plan.pattern:
        summary = f"[{plan.pattern}] {summary}".strip()
    numbers = {**_numbers(rec.bench.model_dump() if rec.bench else {}, "bench."),
               **_numbers(rec.measurements.model_dump() if rec.measurements else {}, "")}
    if rec.score is not None:
        numbers["score"] = float(rec.score)
    return AttemptView(rec.n, summary, list(plan.cited_wiki) if plan else [], passed, promoted, reason, numbers)


def read_attempts(path: Path) -> list[Attempt]:
    """Records of one attempts.jsonl (aka.records' reader); a missing or damaged log is a LessonError."""
    if not path.is_file():
        raise LessonError(f"{path}: no attempts log; pass a run folder such as runs/<op>/<run-id>")
    try:
        return read_attempt_log(path)
    except AttemptLogError as exc:
        raise LessonError(str(exc)) from None


class Lesson(BaseModel):
    """One thing a run learned, with the evidence."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["worked", "failed"]
    what: str = Field(description="the change that was tried")
    why: str = Field(description="the decision's reason: gain, gate failure, no speedup, crash")
    measurements: dict[str, float] = Field(default_factory=dict)
    cited_wiki: list[str] = Field(default_factory=list)
    attempt: int


def lessons_from_attempts(records: list[Attempt]) -> list[Lesson]:
    """Pure: one lesson per attempt that says something (promoted, or failed with a reason)."""
    out = []
    for i, rec in enumerate(records):
        v = view(rec, i)
        if not v.summary and not v.reason:
            continue
        why = v.reason or ("promoted" if v.promoted else "not promoted (no reason recorded)")
        out.append(Lesson(kind="worked" if v.promoted else "failed", what=v.summary or "(no plan summary)",
                          why=why, measurements=v.measurements, cited_wiki=v.cited_wiki, attempt=v.attempt))
    return out


def write_lessons(run_dir: Path) -> list[Lesson]:
    """Read run_dir/attempts.jsonl and write run_dir/lessons.jsonl (replacing it).

    A run that ended before its first attempt (no log yet) learned nothing: an empty file."""
    log = run_dir / "attempts.jsonl"
    lessons = lessons_from_attempts(read_attempts(log) if log.is_file() else [])
    text = "".join(les.model_dump_json() + "\n" for les in lessons)
    (run_dir / "lessons.jsonl").write_text(text, encoding="utf-8")
    return lessons


def load_lessons(run_dir: Path) -> list[Lesson]:
    """lessons.jsonl when the run wrote it, else derived from its attempts now."""
    path = run_dir / "lessons.jsonl"
    if path.is_file():
        return [Lesson.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]
    return lessons_from_attempts(read_attempts(run_dir / "attempts.jsonl"))


# reasons that say nothing about the change itself (where it ran, not what it did)
_UNINFORMATIVE = ("interpreter timings cannot promote", "identical code already measured")


def top_lessons(op_runs: Path, limit: int = 8, width: int = 220) -> list[str]:
    """The op's most useful lessons from earlier runs (runs/<op>/*/lessons.jsonl), one line each, for
    the planner: what worked, best score first, then what failed and why, newest run first; the same
    change once. Unreadable files are skipped: an old run must not stop a new one."""
    worked: list[tuple[float, str, str]] = []
    failed: list[tuple[str, str]] = []
    seen: set[str] = set()
    for run in sorted((p for p in op_runs.glob("*/lessons.jsonl")), reverse=True):
        try:
            lessons = load_lessons(run.parent)
        except (OSError, ValueError, LessonError):
            continue
        for les in lessons:
            key = " ".join(les.what.lower().split())[:120]
            if key in seen or any(u in les.why for u in _UNINFORMATIVE):
                continue
            seen.add(key)
            where = f"run {run.parent.name} #{les.attempt}"
            if les.kind == "worked":
                score = les.measurements.get("score", les.measurements.get("geomean", 0.0))
                worked.append((score, f"worked ({where}, {score:.3f}x vs baseline): {les.what}", key))
            else:
                failed.append((f"failed ({where}): {les.what} -- {les.why}", key))
    lines = [w[1] for w in sorted(worked, key=lambda w: -w[0])] + [f[0] for f in failed]
    return [ln if len(ln) <= width else ln[: width - 1] + "…" for ln in lines[:limit]]


@dataclass(frozen=True)
class Draft:
    action: Literal["new", "update"]
    card_id: str
    relpath: str  # where it would go under wiki/, for the reviewer
    text: str


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())[:6]
    return "-".join(words) or "lesson"


def _evidence(lessons: list[Lesson], run: str) -> str:
    rows = []
    for les in lessons:
        meas = ", ".join(f"{k}={v:g}" for k, v in sorted(les.measurements.items())) or "no measurements"
        rows.append(f"- {run} attempt {les.attempt}: {les.kind}: {les.what} — {les.why} ({meas})")
    return "\n".join(rows) + "\n"


def distill(lessons: list[Lesson], run: str, known_ids: set[str]) -> list[Draft]:
    """Drafts for a person to review: evidence appended to cited cards, new cards for uncited wins
    and uncited failures. Deterministic; never touches wiki/."""
    drafts: list[Draft] = []
    by_card: dict[str, list[Lesson]] = {}
    for les in lessons:
        for cid in les.cited_wiki:
            by_card.setdefault(cid, []).append(les)
    for cid in sorted(by_card):
        if cid not in known_ids:
            continue  # a plan cited an id the wiki does not have: stats reports it, no draft
        text = f"<!-- append to the card '{cid}' under '## Evidence from runs' -->\n" + _evidence(by_card[cid], run)
        drafts.append(Draft("update", cid, f"(existing card {cid})", text))
    seen: set[str] = set()
    for les in lessons:
        if les.cited_wiki:
            continue
        kind, folder = ("technique", "techniques") if les.kind == "worked" else ("anti-pattern", "anti-patterns")
        cid = f"draft-{_slug(les.what)}"
        cid = f"{cid}-{les.attempt}" if cid in seen else cid
        seen.add(cid)
        fm = (f"---\nid: {cid}\nkind: {kind}\ntitle: {json.dumps(les.what[:100] or cid)}\narch: []\nops: []\n"
              f"tags: []\nsources:\n  - \"{run} attempt {les.attempt} (aka run log)\"\n---\n")
        body = (f"## When it applies\nTODO (reviewer): the regime where this held.\n\n## Mechanism\n{les.what}\n\n"
                f"## Observed\n{_evidence([les], run)}\n## How to verify\nTODO (reviewer).\n\n## Pitfalls\n{les.why}\n")
        drafts.append(Draft("new", cid, f"{folder}/{cid}.md", fm + body))
    return drafts
