"""The embedded default backend: a planner and a search over the op's pattern library, no network.

A pattern (kernels/<op>/patterns/<name>.yaml) names a template kernel whose module-level CONFIG
dict is the only thing a candidate changes, the structural choices it pins (`fixed`), which of the
template's SPACE entries it tunes, constraints that keep a configuration valid, regions of the
space to prefer given hardware facts, and `when`, the hardware facts the pattern needs at all (a
Gluon template: `not interpreter and capability == 'sm_90'`, since the interpreter cannot run it).
Without a patterns folder the baseline itself, with its CONFIG/SPACE, is the one pattern, so a new op
gets the search for free.

The backend keeps no state: every plan() rebuilds the search from the run's finished attempts,
which is what makes `aka optimize --resume` propose exactly what the killed run would have. What
earlier runs measured (kernels/<op>/knowledge.json, aka.knowledge.measured) joins them where it
applies: the same device model (ctx.hardware's name), ranked timing, incumbent code and template
code; the search neither re-measures those points nor proposes what they measured 10% or more slower
(aka.agent.search, `known`). A structure whose first looks lost against several earlier kernels on
this device model and timing (code edited since by hand) gets its first look only when nothing else
is left (`deferred`). A run's own entries are left out: its history already holds them.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aka.agent.llm.base import BackendExhausted, Context
from aka.agent.search import Deferred, Known, Proposal, Structure, Trial, propose
from aka.contract.module_config import render as render_config
from aka.errors import AkaError
from aka.evaluate.parent.outcomes import code_hash
from aka.knowledge.evidence import Constraints, Evidence, kernel_params, steer
from aka.knowledge.measured import deferred, deferred_note, knowledge_path, read_knowledge, template_hash
from aka.records import Attempt, Plan, RunRecordError, Usage, read_run_record


class PatternError(AkaError):
    """A pattern file or template that cannot be used."""


@dataclass
class Pattern:
    name: str
    description: str
    template: Path
    fixed: dict[str, Any]
    params: list[str] | None
    constraints: list[str]
    regions: list[dict[str, Any]]
    when: str = "True"  # an expression over the hardware facts (sms, interpreter, capability, name)


@functools.lru_cache(maxsize=4)  # a tree is ~5 MB: the templates and the incumbent
def _body(source: str) -> tuple[ast.stmt, ...]:
    """The module's statements, parsed once per source: every plan reads each template's CONFIG and
    SPACE (gdn_prefill's is ~80 kB, about 0.1 s a parse), and callers only read the nodes."""
    return tuple(ast.parse(source).body)


def config_node(source: str, path: str = "<template>") -> ast.Assign:
    for node in _body(source):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CONFIG" for t in node.targets):
            return node
    raise PatternError(f"{path}: no module-level CONFIG = {{...}} to substitute")


def read_dict(source: str, name: str, path: str = "<template>") -> dict[str, Any]:
    """A module-level literal dict (CONFIG or SPACE) without importing the module."""
    for node in _body(source):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            try:
                return dict(ast.literal_eval(node.value))
            except ValueError as exc:
                raise PatternError(f"{path}: {name} is not a literal dict: {exc}") from None
    return {}


def render(template_source: str, config: dict[str, Any]) -> str:
    """The template with its CONFIG literal replaced by `config` (everything else byte-identical)."""
    config_node(template_source)  # the pattern error names the template when it has no CONFIG
    return render_config(template_source, config)


def load_patterns(kernel_dir: Path, baseline: Path) -> list[Pattern]:
    pdir = kernel_dir / "patterns"
    files = sorted(pdir.glob("*.yaml")) if pdir.is_dir() else []
    if not files:
        return [Pattern("baseline", "the baseline's own CONFIG/SPACE", baseline, {}, None, [], [])]
    out = []
    for f in files:
        raw = yaml.safe_load(f.read_text()) or {}
        try:
            out.append(
                Pattern(
                    name=raw["name"],
                    description=raw.get("description", ""),
                    template=(f.parent / raw["template"]).resolve(),
                    fixed=dict(raw.get("fixed") or {}),
                    params=raw.get("params"),
                    constraints=list(raw.get("constraints") or []),
                    regions=list(raw.get("regions") or []),
                    when=str(raw.get("when", "True")),
                )
            )
        except KeyError as exc:
            raise PatternError(f"{f}: missing field {exc}") from None
    return out


def _facts(hardware: dict[str, Any]) -> dict[str, Any]:
    return {"sms": 0, "interpreter": False, "capability": "", "name": "", **hardware}


def applies(p: Pattern, hardware: dict[str, Any]) -> bool:
    """Whether the pattern's `when` holds on this hardware (an unknown fact is a PatternError naming it)."""
    try:
        return bool(eval(p.when, {"__builtins__": {}}, _facts(hardware)))
    except Exception as exc:  # the expression is the pattern author's: name the file's field
        raise PatternError(f"pattern '{p.name}': when: {p.when!r} cannot be evaluated ({exc})") from None


def structure_of(p: Pattern, hardware: dict[str, Any], incumbent_config: dict[str, Any]) -> Structure:
    """The planner: pin the pattern's structure, pick the region its hardware facts select."""
    src = p.template.read_text()
    config = read_dict(src, "CONFIG", str(p.template))
    space = read_dict(src, "SPACE", str(p.template))
    names = p.params if p.params is not None else [k for k in space if k not in p.fixed]
    space = {k: list(space[k]) for k in names if k in space}
    facts = _facts(hardware)
    for region in p.regions:
        if eval(str(region.get("when", "True")), {"__builtins__": {}}, facts):
            space.update({k: list(v) for k, v in (region.get("space") or {}).items() if k in space})
            break
    start = {**config, **{k: v for k, v in incumbent_config.items() if k in config}, **p.fixed}
    for k, vals in space.items():  # keep the start inside the chosen region
        if start.get(k) not in vals:
            start[k] = vals[len(vals) // 2]
    return Structure(p.name, space, start, tuple(p.constraints))


def trials_from(history: list[Attempt]) -> list[Trial]:
    out = []
    for rec in history:
        if not (rec.plan and rec.plan.pattern):
            continue  # an attempt some other backend planned: not part of this search
        config = rec.config or rec.plan.fixed_config()
        out.append(Trial(rec.plan.pattern, config, rec.score, rec.failed_stage,
                         rec.decision.blocked_by if rec.decision else ""))
    return out


class OfflineBackend:
    name = "offline"

    def __init__(self, seed: int | None = None):
        self.seed = seed

    def _structures(self, ctx: Context) -> tuple[list[Pattern], list[Structure]]:
        patterns = [p for p in load_patterns(Path(ctx.kernel_dir), Path(ctx.baseline_path))
                    if applies(p, ctx.hardware or {})]
        inc = read_dict(ctx.incumbent_source, "CONFIG")
        return patterns, [structure_of(p, ctx.hardware, inc) for p in patterns]

    def plan(self, ctx: Context) -> tuple[Plan, Usage]:
        patterns, structures = self._structures(ctx)
        if not patterns:  # every pattern's `when` excludes this hardware: nothing to search here
            facts = _facts(ctx.hardware or {})
            where = ", ".join(f"{k} {facts[k]!r}" for k in ("name", "capability", "interpreter"))
            raise BackendExhausted(f"{ctx.op}: no pattern of {Path(ctx.kernel_dir) / 'patterns'} applies on this "
                                   f"hardware ({where}): each one's `when` excludes it, so the offline search has "
                                   "nothing to propose and the incumbent stays")
        seed = ctx.seed if self.seed is None else self.seed
        inc = read_dict(ctx.incumbent_source, "CONFIG")
        # the incumbent is a measured point of whichever structure it belongs to: never re-propose it
        here = [Trial(s.name, s.start, ctx.incumbent_score) for s in structures if s.start == inc]
        steered = {s.name: _steer(s, ctx) for s in structures}
        structures = [dataclasses.replace(s, space=steered[s.name].apply(s.space, s.start)) for s in structures]
        known, deferrals = known_for(ctx, patterns)
        prop = propose(structures, here + trials_from(ctx.history), seed, pending=trials_from(ctx.pending),
                       known=known, incumbent_score=ctx.incumbent_score, deferred=deferrals)
        if prop is None:
            raise BackendExhausted(f"{ctx.op}: every configuration of every pattern has been tried")
        plan = _as_plan(prop, next(p for p in patterns if p.name == prop.structure.name))
        rules = steered[prop.structure.name]
        return plan.model_copy(update={"cited_wiki": cited_cards(prop, ctx),
                                       "cited_evidence": plan.cited_evidence + rules.cited,
                                       "avoided": plan.avoided + rules.notes}), Usage()

    def candidate(self, plan: Plan, ctx: Context) -> tuple[str, Usage]:
        patterns = {p.name: p for p in load_patterns(Path(ctx.kernel_dir), Path(ctx.baseline_path))}
        if plan.pattern not in patterns:
            raise PatternError(f"plan names unknown pattern '{plan.pattern}'; known: {', '.join(patterns)}")
        src = patterns[plan.pattern].template.read_text()
        config = {**read_dict(src, "CONFIG"), **plan.fixed_config()}
        return render(src, config), Usage()


def known_for(ctx: Context, patterns: list[Pattern]) -> tuple[list[Known], list[Deferred]]:
    """Earlier runs' measurements that apply to this plan: kernels/<op>/knowledge.json's entries for
    this device model (ctx.hardware's name), the run's ranked timing, this incumbent's code and each
    pattern's template code as it is now; never from this run itself (its history holds them) and
    never in the interpreter. Beside them, the patterns whose first looks the entries against earlier
    code (same device model and timing, another incumbent) defer (aka.knowledge.measured.deferred):
    their templates may have changed with that code, so those are not compared."""
    hw = ctx.hardware or {}
    device, timing = hw.get("name"), rank_timing(ctx)
    if not device or hw.get("interpreter") or timing is None:
        return [], []
    inc = code_hash(ctx.incumbent_source)
    k = read_knowledge(knowledge_path(ctx.kernel_dir))
    this_run = Path(ctx.run_dir).name if ctx.run_dir else None
    entries = [e for e in k.applicable(device, timing, inc, read_dict(ctx.incumbent_source, "CONFIG"))
               if e.run_id != this_run]
    stale = [e for e in k.stale(device, timing, inc) if e.run_id != this_run]
    if not entries and not stale:
        return [], []
    current = {p.name: template_hash(p.template.read_text()) for p in patterns}
    entries = [e for e in entries if current.get(e.structure) == e.template_hash]
    known = [Known(e.structure, e.config, e.changes, e.ratio, e.failed, e.blocked_by,
                   e.note(chained=e.incumbent_hash != inc)) for e in entries]
    later = [Deferred(name, tuple(e.ratio for e in looks), deferred_note(name, looks))
             for name, looks in deferred(stale, entries).items() if name in current]
    return known, later


def rank_timing(ctx: Context) -> str | None:
    """The timing this run ranks on ("eager" or "graph"): a Context field of that name where there is
    one, else the run's run.json (baseline.rank_timing, what the set-up measured in), else the op's
    contract; None when none can be read (then no knowledge applies)."""
    if getattr(ctx, "rank_timing", None) in ("eager", "graph"):
        return ctx.rank_timing
    if ctx.run_dir:
        try:
            got = read_run_record(Path(ctx.run_dir)).baseline.rank_timing
            if got in ("eager", "graph"):
                return got
        except RunRecordError:
            pass
    from aka.contract.ops import get_op

    root = Path(ctx.root) if ctx.root else Path(ctx.kernel_dir).resolve().parents[1]
    try:
        return get_op(ctx.op, root).spec.rank_timing
    except (AkaError, OSError, ValueError, IndexError):
        return None


def _as_plan(prop: Proposal, pattern: Pattern) -> Plan:
    structural = f"{pattern.name}: {pattern.description}" if prop.phase == "structure" else ""
    return Plan(
        hypothesis=prop.rationale,
        structural_change=structural,
        expected_effect={},
        risks=[] if prop.phase == "parameters" else ["a structure untried on this device"],
        param_ranges={k: [v] for k, v in prop.config.items()},
        avoided=prop.avoided,
        pattern=pattern.name,
        cited_evidence=[f"{k}: {a} -> {b}" for k, (a, b) in prop.changed.items()],
    )


def _steer(s: Structure, ctx: Context) -> Constraints:
    """What the incumbent's evidence forbids or prefers in this structure's space (issue 9): e.g. a
    spilling kernel gets no larger blocks or more stages than it has now."""
    if not ctx.evidence:
        return Constraints()
    evidence = [Evidence.model_validate(e) for e in ctx.evidence]
    return steer(evidence, s.space, s.start, kernel_params(ctx.incumbent_source))


# A CONFIG key -> the wiki tags of the technique changing it touches. Only cards carrying one of
# these tags are cited, so a citation always names what the plan actually changes.
_TOPICS: list[tuple[re.Pattern[str], tuple[str, ...]]] = [
    (re.compile(r"^cp(_|$)"), ("context-parallel",)),  # segments composed through affine transitions
    (re.compile(r"^prep_prec$"), ("solve-tril",)),  # how the chunk's triangular inverse is formed
    (re.compile(r"(^|_)(B[A-Z0-9]*|BLOCK\w*)$|warps"), ("register-pressure",)),  # tiles, warps, spills
    (re.compile(r"stages|prefetch"), ("num-stages",)),  # software pipelining depth, loads ahead of use
]


def topic_tags(keys: list[str]) -> list[str]:
    return list(dict.fromkeys(tag for k in keys for rx, tags in _TOPICS if rx.search(k) for tag in tags))


def cited_cards(prop: Proposal, ctx: Context) -> list[str]:
    """Wiki ids behind this proposal: the cards retrieved for the change (the keys a structure's
    start changes from the incumbent, or those a mutation moved) whose tags match its topic."""
    if not ctx.root:
        return []
    from aka.wiki import cards_for_plan, load_wiki, wiki_dir

    wdir = wiki_dir(Path(ctx.root))
    if not wdir.is_dir():
        return []
    if prop.phase == "structure":  # what the structure's start changes relative to the incumbent
        inc = read_dict(ctx.incumbent_source, "CONFIG")
        keys = [k for k, v in prop.config.items() if inc.get(k, v) != v]
    else:
        keys = list(prop.changed)
    tags = topic_tags(keys)
    if not tags:
        return []
    arch = (ctx.hardware or {}).get("capability") or None
    cards = cards_for_plan(load_wiki(wdir), ctx.op, arch, evidence_tags=tuple(tags))
    return [c.id for c in cards if set(c.meta.tags) & set(tags)]


def make_backend(**options: Any) -> OfflineBackend:
    return OfflineBackend(**options)
