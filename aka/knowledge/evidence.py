"""Profiler evidence a plan can cite, and the constraints the offline planner derives from it (pure).

:func:`evidence_for_plan` turns one ProfileSummary (ncu or torch-profiler kernels plus compile
statistics) and the roofline fractions the bench measured into short typed items with stable ids
("prof:spills:_fwd_kernel"), so that a plan can say which measurement it acts on and the attempts
log can record it. :func:`steer` maps those items onto a kernel's CONFIG space: a spilling kernel
may not get larger blocks or more stages; a kernel that keeps neither memory nor SMs busy is
steered towards more programs and deeper pipelines. Kernel -> CONFIG keys come from the kernel
module's launch sites (:func:`kernel_params`), so no op needs to declare them.

Thresholds are leads from the usual ncu reading of Hopper kernels (not tuned here): occupancy
below 25 % with a small grid, neither memory nor SM throughput above 40 %, a tenth of shared
wavefronts replayed for bank conflicts; kernels under 5 % of the call's time are ignored.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aka.knowledge.ncu_report import KernelProfile, ProfileSummary

Kind = Literal["spills", "low-occupancy", "memory-bound", "compute-bound", "latency-bound", "bank-conflicts",
               "time-share", "roofline-gap"]
MIN_SHARE = 0.05  # kernels below this share of the call are noise for planning
LOW_OCCUPANCY_PCT = 25.0
BUSY_PCT = 60.0  # a unit above this is the bound
IDLE_PCT = 40.0  # both units below this: latency-bound (stalls, serial chains, too few programs)
CONFLICT_RATIO = 0.10  # bank-conflict wavefronts per shared wavefront


class Evidence(BaseModel):
    """One measured fact a plan may cite by ``id``."""

    model_config = ConfigDict(frozen=True)
    id: str = Field(description="stable id, e.g. prof:spills:_fwd_kernel (cite this in Plan.cited_evidence)")
    kind: Kind
    kernel: str = Field("", description="kernel name; empty for a whole-shape fact")
    shape: str = ""
    text: str = Field(description="one line with the numbers, for prompts and the attempts log")
    numbers: dict[str, float] = Field(default_factory=dict)


def _shares(kernels: list[KernelProfile]) -> dict[str, tuple[float, float]]:
    """kernel name -> (total µs, share of the call), summed over its launches."""
    tot: dict[str, float] = {}
    for k in kernels:
        tot[k.name] = tot.get(k.name, 0.0) + (k.duration_us or 0.0)
    whole = sum(tot.values())
    return {n: (us, us / whole if whole > 0 else 0.0) for n, us in tot.items()}


def _main_launch(kernels: list[KernelProfile], name: str) -> KernelProfile:
    return max((k for k in kernels if k.name == name), key=lambda k: k.duration_us or 0.0)


def evidence_for_plan(summary: ProfileSummary, roofline_gaps: dict[str, float] | None = None) -> list[Evidence]:
    """Evidence items from one profile, largest time share first.

    roofline_gaps: shape id -> fraction of the roofline the incumbent reaches (bench's
    ``roofline_frac``); the profiled shape's entry becomes a "roofline-gap" item.
    """
    out: list[Evidence] = []
    shape = summary.shape
    frac = (roofline_gaps or {}).get(shape, summary.roofline_frac)
    if frac is not None:
        out.append(Evidence(id=f"roofline:{shape}", kind="roofline-gap", shape=shape,
                            text=f"{shape}: {frac:.0%} of the roofline", numbers={"roofline_frac": round(frac, 4)}))
    shares = _shares(summary.kernels)
    ranked = sorted(shares.items(), key=lambda kv: -kv[1][0])
    if ranked:
        name, (us, share) = ranked[0]
        whole = sum(v[0] for v in shares.values())
        out.append(Evidence(id=f"prof:time-share:{name}", kind="time-share", kernel=name, shape=shape,
                            text=f"{name} takes {share:.0%} of the call ({us:.1f} µs of {whole:.1f})",
                            numbers={"share": round(share, 4), "us": round(us, 2)}))
    if summary.compile and summary.compile.available:
        for name, ks in summary.compile.by_name().items():
            if (ks.n_spills or 0) > 0 or ks.local_ldst > 0:
                share = shares.get(name, (0.0, 0.0))[1]
                out.append(Evidence(
                    id=f"prof:spills:{name}", kind="spills", kernel=name, shape=shape,
                    text=f"{name} spills: {ks.n_spills} local words/thread at {ks.n_regs} registers, "
                         f"{ks.local_ldst} LDL/STL, {ks.num_warps} warps, {ks.num_stages} stages",
                    numbers={"n_spills": float(ks.n_spills or 0), "n_regs": float(ks.n_regs or 0),
                             "local_ldst": float(ks.local_ldst), "share": round(share, 4)}))
    for name, (_us, share) in ranked:
        if share >= MIN_SHARE:
            out.extend(_kernel_items(_main_launch(summary.kernels, name), share, shape))
    return out


def _kernel_items(k: KernelProfile, share: float, shape: str) -> list[Evidence]:
    items: list[Evidence] = []
    n = k.name
    mem = max(x for x in (k.dram_throughput_pct, k.memory_throughput_pct, -1.0) if x is not None)
    sm = k.sm_throughput_pct
    stall = ", ".join(f"{s.reason} {s.fraction:.0%}" for s in k.stalls) or "stalls not measured"
    base = {"share": round(share, 4)}
    occ = k.achieved_occupancy_pct
    if occ is not None and occ < LOW_OCCUPANCY_PCT:
        items.append(Evidence(id=f"prof:low-occupancy:{n}", kind="low-occupancy", kernel=n, shape=shape,
                              text=f"{n}: achieved occupancy {occ:.0f}% (theoretical "
                                   f"{_pct(k.theoretical_occupancy_pct)}), grid {_num(k.grid_size)} programs",
                              numbers={**base, "achieved_occupancy_pct": occ,
                                       **_opt("theoretical_occupancy_pct", k.theoretical_occupancy_pct),
                                       **_opt("grid_size", k.grid_size)}))
    if sm is not None and mem >= 0:
        nums = {**base, "memory_pct": mem, "sm_pct": sm}
        if mem >= BUSY_PCT and mem >= sm:
            items.append(Evidence(id=f"prof:memory-bound:{n}", kind="memory-bound", kernel=n, shape=shape,
                                  text=f"{n}: memory {mem:.0f}% of peak vs SM {sm:.0f}%: fewer bytes, not more math",
                                  numbers=nums))
        elif sm >= BUSY_PCT:
            items.append(Evidence(id=f"prof:compute-bound:{n}", kind="compute-bound", kernel=n, shape=shape,
                                  text=f"{n}: SM {sm:.0f}% of peak vs memory {mem:.0f}%", numbers=nums))
        elif mem < IDLE_PCT and sm < IDLE_PCT:
            items.append(Evidence(id=f"prof:latency-bound:{n}", kind="latency-bound", kernel=n, shape=shape,
                                  text=f"{n}: memory {mem:.0f}% and SM {sm:.0f}% of peak, both idle; "
                                       f"top stalls: {stall}",
                                  numbers={**nums, **{f"stall_{s.reason}": s.fraction for s in k.stalls}}))
    conflicts = (k.smem_bank_conflicts_ld or 0.0) + (k.smem_bank_conflicts_st or 0.0)
    if conflicts > 0 and (k.smem_wavefronts is None or conflicts / max(k.smem_wavefronts, 1.0) >= CONFLICT_RATIO):
        ratio = conflicts / k.smem_wavefronts if k.smem_wavefronts else None
        items.append(Evidence(id=f"prof:bank-conflicts:{n}", kind="bank-conflicts", kernel=n, shape=shape,
                              text=f"{n}: {conflicts:.0f} shared-memory bank conflicts "
                                   f"(ld {_num(k.smem_bank_conflicts_ld)}, st {_num(k.smem_bank_conflicts_st)})"
                                   + (f", {ratio:.0%} of shared wavefronts" if ratio is not None else ""),
                              numbers={**base, "conflicts": conflicts, **_opt("ratio", ratio)}))
    return items


def _opt(key: str, value: float | None) -> dict[str, float]:
    return {} if value is None else {key: float(value)}


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f}%"


def _num(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f}"


def as_prompt(evidence: list[Evidence]) -> str:
    """The lines an LLM planner gets: '- [id] text', ready to cite."""
    return "\n".join(f"- [{e.id}] {e.text}" for e in evidence)


# ---------------------------------------------------------------------------------------------
# steering the offline search


class Constraints(BaseModel):
    """What the evidence asks of the next configuration: values to drop, values to try first."""

    forbid: dict[str, list[Any]] = Field(default_factory=dict, description="param -> values not to try")
    prefer: dict[str, list[Any]] = Field(default_factory=dict, description="param -> values to try first")
    cited: list[str] = Field(default_factory=list, description="evidence ids that produced a rule")
    notes: list[str] = Field(default_factory=list, description="one line per rule, for Plan.avoided")

    def apply(self, space: dict[str, list[Any]], config: dict[str, Any]) -> dict[str, list[Any]]:
        """The space without forbidden values, order kept (the search steps to neighbours by position);
        never drops the current value, so the incumbent stays reachable."""
        return {k: [v for v in vals if v not in self.forbid.get(k, []) or v == config.get(k)]
                for k, vals in space.items()}

    def nudge(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with each preferred parameter set to its first preferred value (a starting point)."""
        return {**config, **{k: vals[0] for k, vals in self.prefer.items() if vals and k in config}}


# block sizes: BV, BLOCK_M, and prefixed ones such as fwd_BV
_BLOCK = re.compile(r"(^|_)(B[A-Z0-9_]*|BLOCK\w*)$")


def kernel_params(source: str) -> dict[str, list[str]]:
    """Which CONFIG keys each kernel's launch reads: ``_fwd_kernel[grid](..., BV=bv, num_warps=cfg["fwd_warps"])``
    with ``bv = cfg["BV"]`` gives {"_fwd_kernel": ["BV", "fwd_warps", ...]}. String subscripts in the
    launch (grid included) and in the local variables it uses, one assignment deep (``a, b = cfg["A"],
    cfg["B"]`` pairs each name with its own value). A launcher object made at module level from a
    kernel (``_FWD_LAUNCH = _Launch(_fwd_kernel)``, called ``_FWD_LAUNCH(grid, args, dict(...))``) counts
    as that kernel's launch."""
    out: dict[str, set[str]] = {}
    tree = ast.parse(source)
    kernels = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list}
    launchers = {node.targets[0].id: node.value.args[0].id for node in tree.body
                 if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                 and isinstance(node.value, ast.Call) and node.value.args
                 and isinstance(node.value.args[0], ast.Name) and node.value.args[0].id in kernels}
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        local: dict[str, set[str]] = {}
        for node in ast.walk(func):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target, value = node.targets[0], node.value
            pairs = [(target, value)]
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
                pairs = list(zip(target.elts, value.elts))
            for name, part in pairs:
                keys = _str_keys(part) if isinstance(name, ast.Name) else set()
                if keys:
                    local.setdefault(name.id, set()).update(keys)
        for node in ast.walk(func):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Subscript) and isinstance(node.func.value, ast.Name):
                kernel, parts = node.func.value.id, [node.func.slice]
            elif isinstance(node.func, ast.Name) and node.func.id in launchers:
                kernel, parts = launchers[node.func.id], []
            else:
                continue
            keys = set()
            for part in [*parts, *node.args, *(kw.value for kw in node.keywords)]:
                keys |= _str_keys(part)
                keys |= {k for n in ast.walk(part) if isinstance(n, ast.Name) for k in local.get(n.id, ())}
            out.setdefault(kernel, set()).update(keys)
    return {k: sorted(v) for k, v in out.items()}


def _str_keys(node: ast.AST) -> set[str]:
    return {n.slice.value for n in ast.walk(node) if isinstance(n, ast.Subscript)
            and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)}


def steer(evidence: list[Evidence], space: dict[str, list[Any]], config: dict[str, Any],
          params: dict[str, list[str]]) -> Constraints:
    """Constraints on ``space`` from the evidence (pure).

    params: kernel name -> CONFIG keys it reads (:func:`kernel_params` of the incumbent's source).
    Rules: spills -> no larger block sizes or more stages for that kernel, more warps preferred;
    low occupancy or latency-bound -> smaller blocks (more programs) and context parallelism
    ('cp': True) preferred; latency-bound and not spilling -> more stages preferred.
    Forbidding beats preferring.
    """
    c = Constraints()
    spilling = {e.kernel for e in evidence if e.kind == "spills"}
    for e in evidence:
        keys = [k for k in params.get(e.kernel, []) if k in space]
        if not keys:
            continue
        before = (dict(c.forbid), dict(c.prefer))
        if e.kind == "spills":
            for k in keys:
                if _BLOCK.search(k) or "stages" in k:
                    _add(c.forbid, k, _above(space[k], config.get(k)))
                elif "warps" in k:
                    _add(c.prefer, k, _above(space[k], config.get(k)))
        elif e.kind in ("low-occupancy", "latency-bound"):
            for k in keys:
                if _BLOCK.search(k):
                    _add(c.prefer, k, _below(space[k], config.get(k)))
                elif "stages" in k and e.kind == "latency-bound" and e.kernel not in spilling:
                    _add(c.prefer, k, _above(space[k], config.get(k)))
            if "cp" in space and True in space["cp"]:
                _add(c.prefer, "cp", [True])
        if (dict(c.forbid), dict(c.prefer)) != before:
            c.cited.append(e.id)
            c.notes.append(f"{e.id}: {e.text}")
    for k, bad in c.forbid.items():  # forbidding beats preferring
        if k in c.prefer:
            c.prefer[k] = [v for v in c.prefer[k] if v not in bad]
    return c


def _add(table: dict[str, list[Any]], key: str, values: list[Any]) -> None:
    if values:
        table[key] = list(dict.fromkeys([*table.get(key, []), *values]))


def _above(values: list[Any], current: Any) -> list[Any]:
    if current not in values or isinstance(current, bool):
        return []
    return values[values.index(current) + 1:] if _numeric(values) else []


def _below(values: list[Any], current: Any) -> list[Any]:
    if current not in values or isinstance(current, bool):
        return []
    return list(reversed(values[: values.index(current)])) if _numeric(values) else []


def _numeric(values: list[Any]) -> bool:
    """Numbers in ascending order: only then do 'larger' and 'smaller' mean something."""
    nums = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return len(nums) == len(values) and nums == sorted(nums)
