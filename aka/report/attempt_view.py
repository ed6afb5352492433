"""`aka show RUN --attempt N`: one attempt in full, as plain text (no terminal needed, no wrapping).

What the model did and what it cost: the plan (hypothesis, structural change, expected effect,
risks, cited evidence), the edit as a unified diff of candidates/<n>.py against the incumbent it was
measured against, the tool calls, the tokens and cost, the model exchanges saved under llm/, and
the decision. Everything is read from the run directory: run.json, attempts.jsonl, candidates/, llm/.

The incumbent an attempt was measured against is the run's starting kernel (candidates/incumbent.py)
until the first promotion, then the last candidate promoted before it (candidates/<m>.py). An attempt
that records its own `incumbent_hash` (an extra field of the log) is diffed against that kernel.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from aka.errors import AkaError
from aka.records import Attempt, read_attempts, read_run_record

ARG_CHARS = 60  # a tool call's arguments, summarised
RESULT_CHARS = 90


class UnknownAttemptError(AkaError):
    """An attempt number the run does not have."""


def _one_line(text: Any, n: int) -> str:
    s = text if isinstance(text, str) else json.dumps(text, separators=(",", ":"), default=str)
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _k(n: int) -> str:
    return f"{n:,}"


def _find(attempts: list[Attempt], n: int, run_id: str) -> Attempt:
    for a in attempts:
        if a.n == n:
            return a
    if not attempts:
        raise UnknownAttemptError(f"run {run_id} has no finished attempt yet; there is no attempt {n}")
    ns = sorted(a.n for a in attempts)
    if len(ns) == 1:
        span = f"only attempt {ns[0]}"
    elif ns == list(range(ns[0], ns[-1] + 1)):
        span = f"attempts {ns[0]}-{ns[-1]}"
    else:
        span = "attempts " + ", ".join(map(str, ns))
    raise UnknownAttemptError(f"run {run_id} has {span}; there is no attempt {n}")


def measured_against(run_dir: Path, attempts: list[Attempt], rec: Attempt, start_label: str,
                     start_hash: str = "") -> tuple[Path, str]:
    """(source path, label) of the incumbent in place when `rec` was measured."""
    cands = run_dir / "candidates"
    path, label = cands / "incumbent.py", f"{start_label} (the run's starting kernel)"
    own = (rec.model_extra or {}).get("incumbent_hash")
    if own and own != start_hash:
        for a in attempts:
            if a.promoted and a.code_hash == own:
                return cands / f"{a.n}.py", f"candidate {a.n} (promoted)"
    if own and own == start_hash:
        return path, label
    for a in attempts:
        if a is rec:
            break
        if a.promoted:
            path, label = cands / f"{a.n}.py", f"candidate {a.n} (promoted)"
    return path, label


def _plan_lines(rec: Attempt) -> list[str]:
    p = rec.plan
    if p is None:
        return ["  (no plan recorded" + (f": the attempt failed at {rec.failed_stage})" if rec.failed_stage else ")")]
    out = []
    if p.pattern:
        out.append(f"  pattern:           {p.pattern}")
    out.append(f"  hypothesis:        {p.hypothesis}")
    out.append(f"  structural change: {p.structural_change or '(none: parameters only)'}")
    if p.expected_effect:
        out.append("  expected effect:")
        out += [f"    {k}: {v}" for k, v in p.expected_effect.items()]
    else:
        out.append("  expected effect:   (none given)")
    out.append("  risks:" + ("" if p.risks else "             (none given)"))
    out += [f"    - {r}" for r in p.risks]
    if p.param_ranges:
        out.append("  parameters:        " + ", ".join(f"{k}={v[0]!r}" if len(v) == 1 else f"{k} in {v!r}"
                                                      for k, v in p.param_ranges.items()))
    if p.avoided:
        out.append("  avoided:")
        out += [f"    - {a}" for a in p.avoided]
    out.append("  cited evidence:" + ("" if p.cited_evidence else "    (none)"))
    out += [f"    - {c}" for c in p.cited_evidence]
    if p.cited_wiki:
        out.append("  cited wiki cards:  " + ", ".join(p.cited_wiki))
    return out


def _diff_lines(run_dir: Path, attempts: list[Attempt], rec: Attempt, start_label: str,
                start_hash: str) -> list[str]:
    cand = run_dir / "candidates" / f"{rec.n}.py"
    inc_path, inc_label = measured_against(run_dir, attempts, rec, start_label, start_hash)
    shown = inc_path.relative_to(run_dir) if inc_path.is_relative_to(run_dir) else inc_path
    head = [f"  against {inc_label}: {shown}"]
    if not cand.is_file():
        why = f"the attempt failed at {rec.failed_stage}" if rec.failed_stage else "no source was kept"
        out = head + [f"  (no candidate source: {why})"]
        if rec.edit:
            out.append(f"  compact edit from attempts.jsonl: {rec.edit}")
        return out
    if not inc_path.is_file():
        return head + [f"  (the incumbent's source {inc_path} is missing: no diff)",
                       *([f"  compact edit from attempts.jsonl: {rec.edit}"] if rec.edit else [])]
    old = inc_path.read_text().splitlines(keepends=True)
    new = cand.read_text().splitlines(keepends=True)
    text = "".join(difflib.unified_diff(old, new, fromfile=inc_label.split(" (")[0], tofile=f"candidate {rec.n}"))
    if not text:
        return head + ["  (identical to the incumbent)"]
    return head + text.splitlines()


def _usage_text(u: dict[str, Any]) -> str:
    inp, cached = u.get("input_tokens", 0) or 0, u.get("cached_tokens", 0) or 0
    written, out = u.get("cache_write_tokens", 0) or 0, u.get("output_tokens", 0) or 0
    cost = u.get("cost_usd")
    money = f"~${cost:.4f}" if cost is not None else "no price for this model"
    return (f"{_k(inp)} in ({_k(max(inp - cached, 0))} uncached, {_k(cached)} read from the cache, "
            f"{_k(written)} written to it), {_k(out)} out; {money}")


def _tool_lines(rec: Attempt) -> list[str]:
    if not rec.tool_calls:
        return ["  (none)"]
    out = []
    for c in rec.tool_calls:
        ok = "ok" if c.get("ok") else "error"
        line = (f"  {c.get('n', '?'):>2}. {c.get('name', '?')}({_one_line(c.get('arguments', ''), ARG_CHARS)}) "
                f"{ok}, {c.get('seconds', 0) or 0:.1f} s")
        if c.get("usage"):
            u = c["usage"]
            line += f", {_k(u.get('input_tokens') or 0)} in / {_k(u.get('output_tokens') or 0)} out"
        out.append(line)
        if c.get("result"):
            out.append(f"      -> {_one_line(c['result'], RESULT_CHARS)}")
    if rec.submit_note:
        out.append(f"  submit note: {_one_line(rec.submit_note, 200)}")
    return out


def _exchange_lines(run_dir: Path, n: int) -> list[str]:
    d = run_dir / "llm"
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("[0-9]*.json")):
        try:
            ex = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if ex.get("attempt") != n:
            continue
        resp = ex.get("response") or {}
        what = ex.get("error") or (f"{len(resp.get('tool_calls') or [])} tool calls" if resp.get("tool_calls")
                                   else f"{len(resp.get('text') or '')} characters of text")
        out.append(f"  {p.relative_to(run_dir)}: {ex.get('stage', '?')}, {resp.get('model') or ex.get('provider', '?')}"
                   f", {ex.get('seconds', 0) or 0:.1f} s, {_one_line(what, 80)}")
    return out


def _decision_lines(rec: Attempt) -> list[str]:
    d = rec.decision
    out = [f"  {d.verdict}: {d.reason}" if d else "  (no decision recorded)"]
    if d and d.blocked_by:
        out.append(f"  blocked by shape {d.blocked_by}")
    if rec.failed_stage:
        out.append(f"  stopped at: {rec.failed_stage}")
    figs = []
    if rec.measurements and rec.measurements.geomean is not None:
        noise = rec.measurements.noise
        figs.append(f"vs incumbent {rec.measurements.geomean:.4f}x (ABBA)"
                    + (f" +/- {noise:.2%}" if noise is not None else ""))
    elif rec.bench and rec.bench.vs_incumbent is not None:
        figs.append(f"vs incumbent {rec.bench.vs_incumbent:.4f}x (screen)")
    if rec.score is not None:
        figs.append(f"vs baseline {rec.score:.4f}x (screen)")
    if figs:
        out.append("  " + "; ".join(figs))
    return out


def attempt_text(run_dir: Path, n: int) -> str:
    """Attempt `n` of the run in `run_dir` in full; UnknownAttemptError (one line naming the range)
    for a number the run does not have."""
    run_dir = Path(run_dir)
    run = read_run_record(run_dir)
    run_id = run.run_id or run_dir.name
    attempts = read_attempts(run_dir)
    rec = _find(attempts, n, run_id)
    start_label, start_hash = run.incumbent.label, run.incumbent.hash
    llm = run.settings.get("llm") or {}
    backend = run.settings.get("backend", "?")
    model = llm.get("model")
    lines = [f"{run.op or run_dir.parent.name} run {run_id}, attempt {n} "
             f"(backend {backend}{', model ' + model if model else ''}; started {rec.started or '?'}, "
             f"{rec.duration_s:.0f} s)", ""]
    lines += ["Plan", *_plan_lines(rec), ""]
    lines += ["Edit (unified diff of the candidate against the incumbent it was measured against)",
              *_diff_lines(run_dir, attempts, rec, start_label, start_hash), ""]
    lines += [f"Tool calls ({len(rec.tool_calls)})", *_tool_lines(rec), ""]
    u = rec.usage.model_dump()
    if rec.usage.input_tokens or rec.usage.output_tokens:
        tok = [f"  {_usage_text(u)}", f"  {len(rec.llm_calls)} model calls"
               + (": " + ", ".join(_one_line(c.get("stage", "?"), 20) for c in rec.llm_calls) if rec.llm_calls else "")]
    else:
        tok = ["  no model tokens (the offline search, or the attempt stopped before a model call)"]
    lines += ["Tokens and cost", *tok]
    ex = _exchange_lines(run_dir, n)
    if ex:
        lines += ["", "Model exchanges (request, answer, usage)", *ex]
    lines += ["", "Decision", *_decision_lines(rec)]
    return "\n".join(lines) + "\n"
