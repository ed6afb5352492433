"""Prompt rendering for the LLM backends: the op's facts, the run so far, the templates in aka/prompts/.

Pure text assembly, no SDK and no I/O besides reading the templates, the wiki and run.json.
Exact evaluation shapes are summarised by regime (ranges and sequence-count buckets), never
listed, so a model cannot special-case the benchmark; per-shape results are keyed by shape id
with a coarse regime label.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from aka.llm.base import Context
from aka.plan import Plan

_HISTORY_MAX = 20  # most recent attempts shown in full; older ones are counted


def template(name: str, **values: Any) -> str:
    """aka/prompts/<name>.md with $fields substituted (a missing field is a bug: KeyError)."""
    text = resources.files("aka").joinpath("prompts", f"{name}.md").read_text()
    return Template(text).substitute({k: str(v) for k, v in values.items()})


# ---------------------------------------------------------------------------------------------
# the op's contract


def _tensor(t) -> str:
    opt = " (optional, may be None)" if t.optional else ""
    return f"- `{t.name}`: {t.shape} {t.dtype}{opt}" + (f"; {t.layout}" if t.layout else "")


def interface_text(spec) -> str:
    lines = ["Inputs:", *map(_tensor, spec.interface.inputs)]
    if spec.interface.scalars:
        lines.append("Scalars:")
        lines += [f"- `{s.name}`: {s.type} = {s.default}" + (f"; {s.doc}" if s.doc else "")
                  for s in spec.interface.scalars]
    lines += ["Outputs:", *map(_tensor, spec.interface.outputs)]
    return "\n".join(lines)


def policy_text(spec, lang: str) -> str:
    """The static policy's rules, from aka.policy itself (so the prompt says exactly what it allows)."""
    from aka.policy import rules_text

    return rules_text(spec, allow_cuda_extension=lang == "cuda")


def _bucket(tokens: int) -> str:
    for limit, name in ((256, "tiny"), (2048, "short"), (8192, "medium"), (32768, "long")):
        if tokens <= limit:
            return name
    return "very long"


def regime(case, params: dict) -> str:
    """A coarse label: sequence count and a length bucket for 'lengths' params, else the case note."""
    for name, p in params.items():
        if p.type == "lengths":
            lens = getattr(case, name)
            return f"{'batch 1' if len(lens) == 1 else f'batch {len(lens)}'}, {_bucket(sum(lens))}"
    return "regime " + case.id


def shapes_text(op) -> str:
    """Per shape set: parameter ranges and regimes, not the exact cases."""
    params = op.spec.case_params
    out = []
    for name in ("full", "smoke", "edge"):
        cases = op.cases(name)
        parts = []
        for p, spec in params.items():
            vals = [getattr(c, p) for c in cases]
            if spec.type == "lengths":
                n = [len(v) for v in vals]
                parts.append(f"{p}: {min(n)}-{max(n)} sequences ({', '.join(sorted({_bucket(sum(v)) for v in vals}))})")
            elif spec.type in ("int", "float"):
                parts.append(f"{p} {min(vals)}-{max(vals)}" if min(vals) != max(vals) else f"{p} {vals[0]}")
            else:
                parts.append(f"{p} in {sorted({str(v) for v in vals})}")
        role = {"full": "timed and gated on a GPU", "smoke": "first gate; on CPU also timed",
                "edge": "gated: lengths 1, tails, ragged batches"}[name]
        out.append(f"- {name} ({len(cases)} cases, {role}): " + "; ".join(parts))
    return "\n".join(out)


def hardware_text(ctx: Context) -> tuple[str, str | None]:
    """Detected device merged with its wiki page; (text, arch for card filtering)."""
    from aka.hardware import detect

    try:
        facts = detect().summary()
    except Exception as exc:  # a broken wiki page must not stop planning; say so instead
        facts = {"known": False, "reason": f"hardware facts unavailable: {exc}"}
    dev = ctx.hardware or {}
    if not facts.get("known") and dev.get("interpreter"):
        text = ("No GPU on this machine: candidates are checked in Triton's CPU interpreter on small shapes "
                "(timings not representative). Target a Hopper GPU (sm_90a, e.g. H200: 132 SMs, 60 MB L2).")
        return text, "sm_90"
    lines = [f"- {k}: {v}" for k, v in facts.items() if v is not None]
    return "\n".join(lines) or f"- {dev.get('name', 'unknown device')}", facts.get("arch")


def system_prompt(op, ctx: Context, lang: str) -> str:
    spec = op.spec
    hw, _ = hardware_text(ctx)
    tol = "\n".join(f"- {k}: rel_l2 <= {t.rel_l2:g}, max_abs_rel <= {t.max_abs_rel:g}"
                    for k, t in spec.tolerances.items())
    return template("system", op=op.name, description=spec.description, entry=spec.entry,
                    outputs=", ".join(spec.output_names()), formula=spec.formula.strip(),
                    interface=interface_text(spec), tolerances=tol, policy=policy_text(spec, lang),
                    shapes=shapes_text(op), hardware=hw)


# ---------------------------------------------------------------------------------------------
# the run so far


def read_run(ctx: Context) -> dict[str, Any]:
    path = Path(ctx.run_dir) / "run.json" if ctx.run_dir else None
    return json.loads(path.read_text()) if path and path.is_file() else {}


def incumbent_results(op, ctx: Context, run: dict[str, Any]) -> str:
    times = dict((run.get("baseline") or {}).get("incumbent_us") or {})
    for rec in ctx.history:  # the last promotion's figures are the incumbent's
        if (rec.get("decision") or {}).get("promote"):
            times = dict(rec["bench"]["times_us"])
    if not times:
        return "(not measured)"
    params = op.spec.case_params
    by_id = {c.id: c for s in ("full", "smoke", "edge") for c in op.cases(s)}
    return "\n".join(f"- {s} ({regime(by_id[s], params) if s in by_id else '?'}): {t:.1f}" for s, t in times.items())


def _fig(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}x"


def history_text(ctx: Context) -> str:
    recs = ctx.history
    if not recs:
        return "(no attempts yet)"
    out = [f"({len(recs) - _HISTORY_MAX} earlier attempts omitted)"] if len(recs) > _HISTORY_MAX else []
    for rec in recs[-_HISTORY_MAX:]:
        plan = rec.get("plan") or {}
        what = plan.get("structural_change") or plan.get("hypothesis") or "(no plan)"
        if plan.get("pattern"):
            what = f"[{plan['pattern']}] {json.dumps(rec.get('config') or {})}"
        bench = rec.get("bench") or {}
        stage = rec.get("failed_stage") or "measured"
        reason = (rec.get("decision") or {}).get("reason", "")
        out.append(f"- #{rec['n']}: {what[:300]}\n  outcome: {stage}; vs baseline {_fig(rec.get('score'))}, "
                   f"vs incumbent {_fig(bench.get('vs_incumbent'))}; {reason[:400]}")
    return "\n".join(out)


def evidence_text(ctx: Context) -> str:
    """The incumbent's profiler and compile-statistics evidence, as the loop put it in the Context."""
    from aka.evidence import Evidence, as_prompt

    items = [Evidence.model_validate(e) for e in ctx.evidence]
    return as_prompt(items) if items else "(no profile in this run; reason from the figures above)"


def cards_text(op, arch: str | None) -> str:
    from aka.wiki import cards_for_plan, load_wiki, render, wiki_dir

    wdir = wiki_dir(op.root)
    if not wdir.is_dir():
        return "(no wiki in this project)"
    return render(cards_for_plan(load_wiki(wdir), op.name, arch)) or "(no card applies)"


def plan_prompt(op, ctx: Context, lang: str) -> str:
    run = read_run(ctx)
    _, arch = hardware_text(ctx)
    timing = (run.get("baseline") or {}).get("timing", "?")
    return template("plan", op=op.name, attempt=ctx.attempt, lang=lang, incumbent_label=ctx.incumbent_label,
                    timing=timing, incumbent_results=incumbent_results(op, ctx, run),
                    incumbent_source=ctx.incumbent_source.rstrip(), cards=cards_text(op, arch),
                    evidence=evidence_text(ctx), history=history_text(ctx))


def codegen_prompt(op, ctx: Context, plan: Plan, lang: str) -> str:
    shown = plan.model_dump(exclude={"pattern"}, exclude_defaults=True)
    return template(f"codegen_{lang}", plan=json.dumps(shown, indent=2), entry=op.spec.entry,
                    outputs=", ".join(op.spec.output_names()), incumbent_source=ctx.incumbent_source.rstrip())
