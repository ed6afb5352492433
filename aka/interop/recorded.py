"""The GPU measurements aka recorded for one exact kernel source, wherever aka keeps them.

- kernels/<op>/promoted.json: the promotion's own figures (its run's screen medians, gate errors, the
  device and versions) and, under ``devices``, first measurements `aka regress` took on other models;
- runs/<op>/<run>/run.json: every optimisation run times its incumbent (the promoted kernel, else the
  baseline) before it starts, with the device and versions.

A figure is the kernel's only when the code hash recorded with it is the hash of the source exported:
promoted.json of an older kernel, or a run of an earlier baseline, describes other code. Timings from
the CPU interpreter are never exported: they say nothing about the kernel's speed.

Every set of timings carries its kind: "graph" (medians of CUDA-graph replays: the kernel's GPU work)
or "eager" (medians of eager calls between CUDA events: the host's launch gaps included). A record that
names none predates the field and was eager. Error figures are the gate's worst rel L2 per case and
output; the gate ran on one device model, and its figures are lent only to timings of the same code on
the same model.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from aka.evaluate.parent.outcomes import code_hash
from aka.records import GateRecord, Promoted, RunRecordError, read_run_record
from aka.run import gitops

LIBS = ("torch", "triton", "cuda", "driver", "python")


class Measurement(BaseModel):
    """One set of per-shape timings of the exported source on one device."""

    source: str = Field(description="where aka recorded it, for the trace's log")
    device: str
    libs: dict[str, str]
    timestamp: str = Field(description="ISO 8601")
    times_us: dict[str, float] = Field(description="case id -> median, µs, of the kind `timing` names")
    timing: Literal["graph", "eager"] = Field(description="graph: CUDA-graph replays; eager: eager calls")
    host_us: dict[str, float] = Field(default_factory=dict, description="case id -> eager minus graph, µs")
    speedup_vs_baseline: dict[str, float] = Field(default_factory=dict)
    gate_sets: list[str] = Field(default_factory=list)
    gate_errors: dict[str, dict[str, dict[str, float | None]]] = Field(default_factory=dict)
    errors_from: str = Field("", description="where gate_errors come from, for the trace's log")


def _timing(kind: str | None) -> Literal["graph", "eager"]:
    return "graph" if kind == "graph" else "eager"  # no field: recorded before aka timed graphs


def _libs(d: dict[str, Any] | BaseModel) -> dict[str, str]:
    d = d.model_dump() if isinstance(d, BaseModel) else d
    return {k: str(d[k]) for k in LIBS if d.get(k) not in (None, "", "?")}


def _iso_from_run_id(run_id: str) -> str:
    try:  # run ids start with the UTC start time (aka.run.store.new_run_id)
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.strptime(run_id[:15], "%Y%m%d-%H%M%S"))
    except ValueError:
        return "unknown"


def _promotion_time(root: Path, op: str, meta: Promoted) -> str:
    """The promotion commit's date, else the run's start (a --no-commit promotion)."""
    try:
        entries = gitops.history(root, op) if gitops.is_repo(root) else []
    except gitops.GitError:
        entries = []
    if entries and entries[0].meta.code_hash == meta.code_hash:
        day, clock, tz = entries[0].date.split(" ")
        return f"{day}T{clock}{tz[:3]}:{tz[3:]}"
    return _iso_from_run_id(meta.run_id)


def from_promoted(root: Path, op: str, source: str) -> tuple[list[Measurement], list[str]]:
    meta = gitops.read_promoted_meta(root, op)
    if meta is None:
        return [], [f"kernels/{op}/promoted.json is missing or unreadable: no promotion figures"]
    h = code_hash(source)
    if meta.code_hash != h:
        return [], [f"kernels/{op}/promoted.json describes code {meta.code_hash}, promoted.py is {h}: "
                    "its figures belong to another kernel and are not exported"]
    out = []
    gate = meta.gate or GateRecord()
    if meta.times_us and meta.device:
        gate_device = gate.device or meta.device
        out.append(Measurement(
            source=f"promotion of run {meta.run_id} attempt {meta.attempt} (kernels/{op}/promoted.json)",
            device=meta.device, libs=_libs(meta), timestamp=_promotion_time(root, op, meta),
            times_us=meta.times_us, timing=_timing(meta.timing), host_us=meta.host_us,
            speedup_vs_baseline=meta.speedup_vs_baseline,
            gate_sets=gate.sets, gate_errors=gate.errors,
            errors_from=f"the promotion's gate ({'+'.join(gate.sets) or '?'}) on {gate_device}"))
    for device, entry in meta.devices.items():
        if entry.times_us and entry.code_hash in (None, h):
            base = entry.baseline_us or {}
            out.append(Measurement(
                source=f"aka regress first measurement on {device} (kernels/{op}/promoted.json devices)",
                device=device, libs=_libs(entry), timestamp=entry.measured_at or "unknown",
                times_us=entry.times_us, timing=_timing(entry.timing),
                speedup_vs_baseline={s: base[s] / t for s, t in entry.times_us.items() if base.get(s) and t}))
    return out, []


def from_runs(runs_root: Path, op: str, source: str) -> tuple[list[Measurement], list[str]]:
    """The newest GPU timing per device model of runs whose incumbent was exactly this source."""
    h = code_hash(source)
    out: dict[str, Measurement] = {}
    interpreted = 0
    for run_json in sorted(runs_root.glob(f"{op}/*/run.json"), reverse=True):
        try:
            info = read_run_record(run_json.parent)
        except RunRecordError:
            continue
        base, dev = info.baseline, info.device
        if info.incumbent.hash != h or not base.incumbent_us:
            continue
        if base.timing != "gpu" or dev.interpreter:
            interpreted += 1
            continue
        gate = base.incumbent_gate
        if (gate is not None and not gate.ok) or dev.name in out:
            continue
        run_id = run_json.parent.name
        out[dev.name] = Measurement(
            source=f"run {run_id}: the incumbent's timing before its first attempt (runs/{op})",
            device=dev.name, libs=_libs(dev), timestamp=info.started or _iso_from_run_id(run_id),
            times_us=base.incumbent_us, timing=_timing(base.rank_timing), host_us=base.incumbent_host_us,
            speedup_vs_baseline={s: base.baseline_us[s] / t for s, t in base.incumbent_us.items()
                                 if base.baseline_us.get(s) and t},
            gate_sets=list(gate.sets) if gate is not None else [])
    notes = [f"{interpreted} run(s) timed this kernel in the CPU interpreter only: not representative, not exported"
             ] if interpreted else []
    return list(out.values()), notes


def measurements(root: Path, op: str, label: str, source: str) -> tuple[list[Measurement], list[str]]:
    """Everything recorded for this source: the promotion's figures first, then runs' timings."""
    found, notes = from_promoted(root, op, source) if label == "promoted" else ([], [])
    more, more_notes = from_runs(root / "runs", op, source)
    found += more
    gated = next((m for m in found if m.gate_errors), None)
    meta = gitops.read_promoted_meta(root, op) if gated else None
    gate_device = (meta.gate.device or None) if meta and meta.gate else None
    for m in found:  # the same code on the same device model: the gate's figures are this timing's too
        if gated is not None and not m.gate_errors and m.device == (gate_device or gated.device):
            m.gate_errors, m.gate_sets, m.errors_from = gated.gate_errors, gated.gate_sets, gated.errors_from
    return found, notes + more_notes
