"""Prompt rendering for the LLM backends: the op's facts, the run so far, the templates in aka/agent/prompts/.

Pure text assembly, no SDK and no I/O besides reading the templates, the wiki and run.json.
Cache-friendly order: what stays the same comes first and is marked cacheable (the system prompt:
contract, policy, shapes, hardware; then the incumbent block: its figures, where its time goes,
its kernels as compiled, evidence, wiki cards, lessons of earlier runs, its source), what changes
every call comes last (attempt number, history, in-flight candidates, noise, the plan). The
incumbent block changes only when a candidate is promoted.

Per-shape results are keyed by shape id with a label giving every dimension exactly except the
sequence lengths, which stay a count and length buckets (of the total, of each sequence): enough to
plan tiles and splits (fa4_decode's q_len 1 and 4 differ, so do 16 x 8k and 16 x 32k), not a lookup
table of the benchmark's lengths.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from aka.agent.llm.base import Context
from aka.contract.shapes import ALL_SETS, ShapeSet, every_case
from aka.records import Attempt, Plan, RunRecord, read_run_record

_HISTORY_MAX = 20  # most recent attempts shown in full; older ones are counted


def template(name: str, **values: Any) -> str:
    """aka/agent/prompts/<name>.md with $fields substituted (a missing field is a bug: KeyError)."""
    text = resources.files("aka.agent").joinpath("prompts", f"{name}.md").read_text()
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
    if spec.knobs:  # the gate passes them on its edge cases: an entry point without them fails there
        lines.append("Knobs (keyword arguments the entry point must take, default None: how to compute, never what):")
        lines += [f"- `{name}`: {doc}" for name, doc in spec.knobs.items()]
    lines += ["Outputs:", *map(_tensor, spec.interface.outputs)]
    return "\n".join(lines)


def policy_text(spec, lang: str) -> str:
    """The static policy's rules, from aka.evaluate.static.policy itself (so the prompt says exactly what it allows)."""
    from aka.evaluate.static.policy import rules_text

    return rules_text(spec, allow_cuda_extension=lang == "cuda")


def _bucket(tokens: int) -> str:
    for limit, name in ((256, "tiny"), (2048, "short"), (8192, "medium"), (32768, "long")):
        if tokens <= limit:
            return name
    return "very long"


def regime(case, params: dict) -> str:
    """'batch 2, medium, ragged up to medium; hk 16, hv 32, dim 128': for a 'lengths' param the sequence
    count and length buckets, then every integer dimension exactly and any other parameter that
    differs from its default."""
    head, dims = "", []
    for name, p in params.items():
        val = getattr(case, name)
        if p.type == "lengths":  # the total's bucket, then each sequence's: 16 x 8k and 16 x 32k differ
            head = f"batch {len(val)}, {_bucket(sum(val))}"
            if len(val) > 1:
                head += f", {_bucket(val[0])} each" if len(set(val)) == 1 else f", ragged up to {_bucket(max(val))}"
        elif p.type == "int" or val != p.default:
            dims.append(name.replace("_", " ") if val is True else f"{name} {val}")
    label = "; ".join(x for x in (head, ", ".join(dims)) if x)
    return label or "regime " + case.id


def shapes_text(op) -> str:
    """Per shape set: parameter ranges and regimes, not the exact cases."""
    params = op.spec.case_params
    out = []
    for name in ALL_SETS:
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
        role = {ShapeSet.FULL: "timed and gated on a GPU", ShapeSet.SMOKE: "first gate; on CPU also timed",
                ShapeSet.EDGE: "gated: lengths 1, tails, ragged batches"}[name]
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
# the incumbent (stable between promotions: one cacheable block)


def read_run(ctx: Context) -> RunRecord:
    """The run's run.json; an empty record outside a run (a prompt rendered on its own)."""
    path = Path(ctx.run_dir) if ctx.run_dir else None
    return read_run_record(path) if path and (path / "run.json").is_file() else RunRecord()


def _promoted(ctx: Context) -> Attempt | None:
    recs = [r for r in ctx.history if r.promoted]
    return recs[-1] if recs else None


def _cases(op) -> dict[str, Any]:
    return every_case(op)


def incumbent_results(op, ctx: Context, run: RunRecord) -> str:
    """Per shape: time, standing against the baseline, roofline fraction, the competitors' times."""
    base = run.baseline
    times = dict(base.incumbent_us)
    roof = dict(base.incumbent_roofline)
    last = _promoted(ctx)
    if last:  # the last promotion's figures are the incumbent's
        times = dict(last.times_us)
        roof = dict((last.bench.roofline if last.bench else None) or {})
    if not times:
        return "(not measured)"
    params, by_id = op.spec.case_params, _cases(op)
    comp = base.competitors_us
    lines = []
    for s, t in times.items():
        parts = [f"{t:.1f} µs"]
        b = base.baseline_us.get(s)
        if b and t:
            parts.append(f"{b / t:.2f}x the baseline's speed")
        if s in roof:
            parts.append(f"{roof[s]:.0%} of the roofline")
        parts += [f"{name} {c[s]:.1f} µs" for name, c in comp.items() if s in c]
        lines.append(f"- {s} ({regime(by_id[s], params) if s in by_id else '?'}): " + ", ".join(parts))
    notes = base.competitors_notes
    return "\n".join(lines + ([f"(competitors: {'; '.join(notes)[:300]})"] if notes else []))


def kernel_times_text(op, ctx: Context, run: RunRecord) -> str:
    """Per-kernel time of the starting incumbent on its profiled and slowest shapes (run.json profile)."""
    prof = run.profile or {}
    if _promoted(ctx):
        return "(profiled for the starting incumbent only; this incumbent's kernels as compiled are below)"
    rows: dict[str, dict[str, float]] = dict(prof.get("kernel_times") or {})
    summary = prof.get("summary") or {}
    if summary.get("kernels"):
        per: dict[str, float] = {}
        for k in summary["kernels"]:
            per[k["name"]] = per.get(k["name"], 0.0) + (k.get("duration_us") or 0.0)
        rows = {summary["shape"]: per, **{s: v for s, v in rows.items() if s != summary["shape"]}}
    if not rows:
        return f"({prof.get('note') or 'no profile in this run'})"
    params, by_id = op.spec.case_params, _cases(op)
    out = []
    for shape, per in rows.items():
        whole = sum(per.values()) or 1.0
        top = sorted(per.items(), key=lambda kv: -kv[1])[:6]
        label = regime(by_id[shape], params) if shape in by_id else "?"
        out.append(f"- {shape} ({label}), {whole:.1f} µs in kernels: "
                   + ", ".join(f"{n} {us:.1f} µs ({us / whole:.0%})" for n, us in top))
    return "\n".join(out)


def compile_text(ctx: Context, run: RunRecord) -> str:
    """Registers, spills, shared memory of each of the incumbent's kernels (its compile statistics)."""
    from aka.evaluate.static.compstats import CompileStats, format_table

    last = _promoted(ctx)
    stats = (getattr(last.compile, "compile_stats", None) if last
             else run.baseline.incumbent_compile)
    if not stats:
        return "(no compile statistics recorded)"
    cs = CompileStats.model_validate(stats)
    if cs.available:  # the largest-register specialisation of each kernel: the one at risk
        cs = cs.model_copy(update={"kernels": list(cs.by_name().values())})
    return "\n".join(f"- {line}" for line in format_table(cs))


def evidence_text(ctx: Context) -> str:
    """The incumbent's profiler and compile-statistics evidence, as the loop put it in the Context."""
    from aka.knowledge.evidence import Evidence, as_prompt

    items = [Evidence.model_validate(e) for e in ctx.evidence]
    return as_prompt(items) if items else "(no profile in this run; reason from the figures above)"


def cards_text(op, arch: str | None) -> str:
    from aka.wiki import cards_for_plan, load_wiki, render, wiki_dir

    wdir = wiki_dir(op.root)
    if not wdir.is_dir():
        return "(no wiki in this project)"
    return render(cards_for_plan(load_wiki(wdir), op.name, arch)) or "(no card applies)"


def lessons_text(ctx: Context) -> str:
    return "\n".join(f"- {x}" for x in ctx.lessons) or "(no earlier run of this op recorded lessons)"


def measured_text(ctx: Context, run: RunRecord) -> str:
    """What earlier GPU runs measured against this incumbent (or one it replaced) on this device model,
    from kernels/<op>/knowledge.json: so a model does not spend attempts re-measuring known losers."""
    from aka.contract.module_config import config_of
    from aka.evaluate.parent.outcomes import code_hash
    from aka.knowledge.measured import knowledge_lines

    hw = ctx.hardware or {}
    timing = run.baseline.rank_timing
    if not hw.get("name") or hw.get("interpreter") or not timing or not ctx.kernel_dir:
        return "(none on this device)"
    lines = knowledge_lines(ctx.kernel_dir, hw["name"], timing, code_hash(ctx.incumbent_source),
                            config_of(ctx.incumbent_source))
    return "\n".join(f"- {x}" for x in lines[:20]) or "(none recorded for this incumbent on this device)"


def incumbent_block(op, ctx: Context, lang: str) -> str:
    run = read_run(ctx)
    _, arch = hardware_text(ctx)
    return template("incumbent", op=op.name, incumbent_label=ctx.incumbent_label,
                    timing=run.baseline.timing or "?",
                    incumbent_results=incumbent_results(op, ctx, run), kernels=kernel_times_text(op, ctx, run),
                    compile=compile_text(ctx, run), evidence=evidence_text(ctx), cards=cards_text(op, arch),
                    lessons=lessons_text(ctx), measured=measured_text(ctx, run),
                    incumbent_source=ctx.incumbent_source.rstrip())


# ---------------------------------------------------------------------------------------------
# the run so far (changes every call: after the cached blocks)


def _fig(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}x"


def shape_ratios(rec: Attempt) -> str:
    """'G1 1.03, G2 0.97' speedups per shape: the ABBA re-measure's, else the screen's paired ones."""
    ratios = rec.measurements.ratios if rec.measurements else {}
    src = "ABBA"
    if not ratios:
        inc = (rec.bench.incumbent_us if rec.bench else None) or {}
        ratios = {s: inc[s] / t for s, t in rec.times_us.items() if inc.get(s) and t}
        src = "screen"
    if not ratios:
        return ""
    return f"per shape vs incumbent ({src}): " + ", ".join(f"{s} {r:.2f}" for s, r in ratios.items())


def _what(rec: Attempt) -> str:
    plan = rec.plan
    if plan is None:
        return "(no plan)"
    what = plan.structural_change or plan.hypothesis or "(no plan)"
    if plan.pattern:  # a sweep's hypothesis names the keys it changed first
        what = f"[{plan.pattern}] {plan.hypothesis or json.dumps(rec.config)}"
    return what[:300]


def history_text(ctx: Context) -> str:
    recs = ctx.history
    flying = list(ctx.pending)
    if not recs and not flying:
        return "(no attempts yet)"
    out = [f"({len(recs) - _HISTORY_MAX} earlier attempts omitted)"] if len(recs) > _HISTORY_MAX else []
    for rec in recs[-_HISTORY_MAX:]:
        stage = rec.failed_stage or "measured"
        reason = rec.decision.reason if rec.decision else ""
        ratios = shape_ratios(rec)
        out.append(f"- #{rec.n}: {_what(rec)}" + (f"\n  edit: {rec.edit}" if rec.edit else "")
                   + f"\n  outcome: {stage}; vs baseline {_fig(rec.score)}, vs incumbent "
                   f"{_fig(rec.bench.vs_incumbent if rec.bench else None)}{'; ' + ratios if ratios else ''}; "
                   f"{reason[:400]}")
    for rec in flying:
        out.append(f"- #{rec.n} IN FLIGHT (written, being measured now: do not propose it again): {_what(rec)}"
                   + (f"\n  edit: {rec.edit}" if rec.edit else ""))
    return "\n".join(out)


def noise_text(ctx: Context, run: RunRecord) -> str:
    rules = run.settings.get("rules") or {}
    need = (f"promotion needs a geomean gain above {rules['min_gain']:.1%} and no shape slower than "
            f"{rules['shape_margin']:.0%}" if rules else "")
    measured = [(r.n, r.compare.noise) for r in ctx.history if r.compare and r.compare.noise is not None]
    if not measured:
        return "; ".join(x for x in ("no ABBA re-measure in this run yet", need) if x)
    n, noise = measured[-1]
    return f"ABBA re-measure noise ±{noise:.1%} of the geomean (attempt {n}, half the 95% interval)" + (
        f"; {need}" if need else "")


def plan_blocks(op, ctx: Context, lang: str) -> list[dict[str, Any]]:
    """The plan call's user message: the incumbent (cacheable), then this attempt's request."""
    run = read_run(ctx)
    ask = template("plan", op=op.name, attempt=ctx.attempt, lang=lang, history=history_text(ctx),
                   noise=noise_text(ctx, run))
    return [{"text": incumbent_block(op, ctx, lang), "cache": True}, {"text": ask}]


def plan_prompt(op, ctx: Context, lang: str) -> str:
    return "\n\n".join(b["text"] for b in plan_blocks(op, ctx, lang))


def codegen_blocks(op, ctx: Context, plan: Plan, lang: str, tools: int = 0, gpu: bool = False) -> list[dict[str, Any]]:
    """The codegen call's user message: the same incumbent block (a cache hit), then the plan and the
    rules; with tools (their cap), what they are for on this machine."""
    shown = plan.model_dump(exclude={"pattern"}, exclude_defaults=True)
    ask = template(f"codegen_{lang}", plan=json.dumps(shown, indent=2), entry=op.spec.entry,
                   outputs=", ".join(op.spec.output_names()))
    if tools:
        where = ("time and profile run on this GPU" if gpu else
                 "this machine has no GPU: compile and check run in Triton's CPU interpreter, time and profile "
                 "answer with an error")
        ask += "\n\n" + template("codegen_tools", cap=tools, where=where)
    return [{"text": incumbent_block(op, ctx, lang), "cache": True}, {"text": ask}]


def repair_text(stage: str, error: str, n: int, of: int) -> str:
    return template("repair", stage=stage, error=error[-4000:], n=n, of=of)
