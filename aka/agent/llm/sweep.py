"""Parameter sweeps of an LLM-written candidate, run by the offline search without asking the model.

When the latest LLM candidate passed the gate and its plan gave several values for keys of the
candidate's module-level CONFIG dict, the next plans are points of aka.agent.search over those ranges
(at most LLMSettings.sweep of them), rendered into that candidate's source by the offline
backend's render(). State comes from the history only, so a resumed run sweeps the same points.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aka.agent.llm.base import Context
from aka.agent.llm.offline import PatternError, read_dict, render
from aka.agent.search import Structure, Trial, propose
from aka.records import Attempt, Plan

PREFIX = "sweep:"


def is_sweep(plan: Plan) -> bool:
    return bool(plan.pattern and plan.pattern.startswith(PREFIX))


def _parent(history: list[Attempt]) -> Attempt | None:
    """The latest attempt the model wrote itself (sweep points and offline plans carry a pattern)."""
    for rec in reversed(history):
        if not (rec.plan and rec.plan.pattern):
            return rec if rec.plan else None
    return None


def _space(ranges: dict[str, list[Any]], config: dict[str, Any]) -> dict[str, list[Any]]:
    space = {}
    for k, vals in ranges.items():
        if k not in config or len(vals) < 2:
            continue
        vals = list(vals) if config[k] in vals else [config[k], *vals]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            vals = sorted(set(vals))  # neighbour steps need an order
        space[k] = vals
    return space


def sweep_plan(ctx: Context, max_points: int) -> Plan | None:
    parent = _parent(ctx.history) if max_points > 0 and ctx.run_dir else None
    if parent is None or parent.score is None:
        return None
    n = parent.n
    try:
        source = (Path(ctx.run_dir) / "candidates" / f"{n}.py").read_text()
        config = read_dict(source, "CONFIG")
    except (OSError, SyntaxError, PatternError):
        return None
    space = _space(parent.plan.param_ranges, config)
    if not space:
        return None
    name = f"{PREFIX}{n}"
    mine = [r for r in [*ctx.history, *ctx.pending] if r.plan and r.plan.pattern == name]
    if len(mine) >= max_points:
        return None
    done = [r for r in ctx.history if r in mine]
    trials = [Trial(name, config, parent.score), *[Trial(name, r.config, r.score, r.failed_stage) for r in done]]
    pending = [Trial(name, r.config, None) for r in mine if r not in done]
    prop = propose([Structure(name, space, config)], trials, ctx.seed, pending=pending)
    if prop is None:
        return None
    changed = {k: v for k, v in prop.config.items() if config.get(k) != v}
    return Plan(hypothesis=f"sweep of attempt {n}'s CONFIG over its plan's ranges: {json.dumps(changed)}",
                param_ranges={k: [v] for k, v in prop.config.items()}, pattern=name,
                # a sweep point is the model's plan re-tuned: the cards it relied on stay cited
                cited_wiki=list(parent.plan.cited_wiki),
                cited_evidence=[f"{k}: {a} -> {b}" for k, (a, b) in prop.changed.items()])


def render_point(plan: Plan, ctx: Context) -> str:
    n = plan.pattern.removeprefix(PREFIX)
    source = (Path(ctx.run_dir) / "candidates" / f"{n}.py").read_text()
    return render(source, {**read_dict(source, "CONFIG"), **plan.fixed_config()})
