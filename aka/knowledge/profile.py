"""Profile summaries: Nsight Compute (ncu) on one shape, condensed into a few typed numbers per kernel.

One profile = the candidate called once on one shape, after warm-up, between cudaProfilerStart and
cudaProfilerStop (``aka.knowledge.profile_target``), under ``ncu --profile-from-start off`` so that
compilation and warm-up launches are never profiled. ``--clock-control none`` because the device's
clocks are left alone (METHOD.md) and the timings must be comparable with ``aka bench``.

The report is exported with ``--page raw --csv --print-units base`` and parsed by
:func:`parse_ncu_csv`, which also reads the long ``Metric Name/Metric Unit/Metric Value`` layout and
tolerates missing metrics ("n/a", absent columns): a metric ncu could not collect is None and
named in ``missing``, never 0. Where ncu is absent or cannot read the counters (gVisor:
"LibraryNotLoaded"; no permission: ERR_NVGPUCTRPERM) the summary says why and carries the torch
profiler's per-kernel durations instead (``source="torch-profiler"``).
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from aka.errors import AkaError
from aka.evaluate.compstats import CompileStats

# Metric names as ncu 2023-2025 spell them on sm_70+ (checked against ncu's section files and
# public reports). Each maps to a KernelProfile field; absent ones become None.
METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "duration_us",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "smem_bank_conflicts_ld",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "smem_bank_conflicts_st",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": "smem_wavefronts",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__grid_size": "grid_size",
    "launch__block_size": "block_size",
}
# Stall reasons: percent of active-warp cycles stalled for each reason (Hopper has ~18 of them).
# A regex, so a reason this ncu does not know costs nothing instead of failing the whole run.
STALL_REGEX = r"regex:smsp__warp_issue_stalled_.*_per_warp_active\.pct"
_STALL = re.compile(
    r"^smsp__(?:warp_issue_stalled_(?P<a>\w+?)_per_warp_active\.pct"
    r"|pcsamp_warps_issue_stalled_(?P<b>\w+?)(?:_not_issued)?(?:\.sum)?"
    r"|average_warp_latency_issue_stalled_(?P<c>\w+?)(?:\.ratio|\.sum)?)$"
)
# "selected" is the warp that issued: not a stall. pcsamp "_not_issued" variants double-count.
_NOT_STALLS = {"selected"}
_TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
               "s": 1e6, "second": 1e6}


class Stall(BaseModel):
    model_config = ConfigDict(frozen=True)
    reason: str = Field(description="ncu's stall reason, e.g. long_scoreboard, barrier, mio_throttle")
    fraction: float = Field(description="share of active-warp cycles (pct metrics) or of samples (pcsamp)")


class KernelProfile(BaseModel):
    """One kernel launch as ncu (or the torch profiler) saw it. None: not measured."""

    model_config = ConfigDict(frozen=True)
    name: str
    launch: int = Field(0, description="ncu's launch ID within the profiled call (order of launch)")
    duration_us: float | None = None
    dram_throughput_pct: float | None = Field(None, description="DRAM bandwidth, % of peak sustained")
    memory_throughput_pct: float | None = Field(None, description="busiest memory unit (L1/L2/DRAM), % of peak")
    sm_throughput_pct: float | None = Field(None, description="busiest SM pipe (incl. tensor cores), % of peak")
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    l2_hit_rate_pct: float | None = None
    smem_bank_conflicts_ld: float | None = None
    smem_bank_conflicts_st: float | None = None
    smem_wavefronts: float | None = Field(None, description="shared-memory wavefronts (conflict-free ideal: requests)")
    registers_per_thread: float | None = None
    grid_size: float | None = None
    block_size: float | None = None
    stalls: list[Stall] = Field(default_factory=list, description="top 3 stall reasons, largest first")
    missing: list[str] = Field(default_factory=list, description="requested metrics the report did not have")
    source: Literal["ncu", "torch-profiler"] = "ncu"


class ProfileSummary(BaseModel):
    """What `aka profile` found on one shape: per-kernel profiles, compile statistics, notes."""

    op: str
    shape: str
    kernel_file: str
    source: Literal["ncu", "torch-profiler", "none"]
    kernels: list[KernelProfile] = Field(default_factory=list)
    compile: CompileStats | None = None
    total_us: float | None = Field(None, description="sum of the kernels' durations in the profiled call")
    floor_us: float | None = Field(None, description="roofline time of the shape at the measured ceilings")
    ablations: dict[str, float] = Field(default_factory=dict, description="leave-one-stage-out: stage -> µs")
    notes: list[str] = Field(default_factory=list, description="why ncu was not used, what was left out")

    @property
    def roofline_frac(self) -> float | None:
        return self.floor_us / self.total_us if self.floor_us and self.total_us else None


# ---------------------------------------------------------------------------------------------
# ncu command lines


_NCU_PLACES = ("opt/nvidia/nsight-compute/*/ncu", "usr/local/cuda/bin/ncu", "usr/local/NVIDIA-Nsight-Compute*/ncu")


def ncu_path() -> str | None:
    """ncu on PATH, else the usual install folders (the device image keeps it under /opt/nvidia)."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in _NCU_PLACES:
        hits = sorted(Path("/").glob(pattern))
        if hits:
            return str(hits[-1])
    return None


def metric_list(stalls: bool = True) -> str:
    return ",".join([*METRICS, *([STALL_REGEX] if stalls else [])])


def ncu_collect_cmd(ncu: str, report: Path, target: list[str], stalls: bool = True) -> list[str]:
    """Profile only what ``target`` runs between cudaProfilerStart/Stop; write ``report`` (.ncu-rep)."""
    return [ncu, "--clock-control", "none", "--target-processes", "all", "--profile-from-start", "off",
            "--metrics", metric_list(stalls), "--force-overwrite", "--export", str(report), *target]


def ncu_export_cmd(ncu: str, report: Path) -> list[str]:
    """Print a saved report as one CSV row per kernel, values in base units (ns, bytes, %)."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base",
            "--print-kernel-base", "function"]


# ---------------------------------------------------------------------------------------------
# parsing a report (pure)


def _number(text: str) -> float | None:
    t = (text or "").strip().replace(",", "")  # ncu prints thousands separators: "10,240,000"
    if not t or t.lower() in ("n/a", "nan", "-"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _csv_rows(text: str) -> list[list[str]]:
    """The CSV part of ncu's output: from the header row ("ID", ...) on, minus ==PROF== lines."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if line.strip() and not line.startswith("==")]
    return [row for row in csv.reader(io.StringIO("\n".join(body)))]


def parse_ncu_csv(text: str) -> list[KernelProfile]:
    """ncu CSV (``--page raw`` wide rows, or long Metric Name/Unit/Value rows) -> one profile per launch."""
    rows = _csv_rows(text)
    if not rows:
        return []
    header = rows[0]
    if "Metric Name" in header:
        per_launch = _long_rows(header, rows[1:])
    else:
        per_launch = _wide_rows(header, rows[1:])
    return [_profile(launch, name, metrics) for launch, (name, metrics) in sorted(per_launch.items())]


Metrics = dict[str, tuple[float | None, str]]  # metric -> (value, unit)


def _wide_rows(header: list[str], rows: list[list[str]]) -> dict[int, tuple[str, Metrics]]:
    col = {h: i for i, h in enumerate(header)}
    units = [""] * len(header)
    out: dict[int, tuple[str, Metrics]] = {}
    for row in rows:
        if not row or not row[0].strip():  # the units row: first cell (ID) empty
            units = row + [""] * (len(header) - len(row))
            continue
        launch = int(_number(row[0]) or 0)
        name = row[col["Kernel Name"]] if "Kernel Name" in col and col["Kernel Name"] < len(row) else "?"
        metrics = {h: (_number(row[i]) if i < len(row) else None, units[i]) for h, i in col.items() if "__" in h}
        out[launch] = (name, metrics)
    return out


def _long_rows(header: list[str], rows: list[list[str]]) -> dict[int, tuple[str, Metrics]]:
    col = {h: i for i, h in enumerate(header)}
    out: dict[int, tuple[str, Metrics]] = {}
    for row in rows:
        if len(row) < len(header) or not row[0].strip():
            continue
        launch = int(_number(row[0]) or 0)
        name, metrics = out.setdefault(launch, (row[col["Kernel Name"]], {}))
        unit = row[col["Metric Unit"]] if "Metric Unit" in col else ""
        metrics[row[col["Metric Name"]]] = (_number(row[col["Metric Value"]]), unit)
    return out


def _profile(launch: int, name: str, metrics: Metrics) -> KernelProfile:
    fields: dict[str, float | None] = {}
    missing = []
    for metric, field in METRICS.items():
        value, unit = metrics.get(metric, (None, ""))
        if value is not None and field == "duration_us":
            value *= _TIME_UNITS.get(unit.strip().lower(), 1e-3)  # base unit of gpu__time_duration is ns
        fields[field] = value
        if value is None:
            missing.append(metric)
    return KernelProfile(name=_short_name(name), launch=launch, stalls=top_stalls(metrics), missing=missing,
                         source="ncu", **fields)


def _short_name(name: str) -> str:
    """'void _fwd_kernel(...)' or '_fwd_kernel(...)' -> '_fwd_kernel' (Triton names carry no signature)."""
    name = name.strip()
    name = name.split("(", 1)[0].strip()
    return name.split()[-1] if " " in name else name


def top_stalls(metrics: Metrics, k: int = 3) -> list[Stall]:
    """The k largest stall reasons as fractions (pct metrics / 100, or share of the pcsamp total)."""
    pct: dict[str, float] = {}
    samples: dict[str, float] = {}
    for metric, (value, _unit) in metrics.items():
        m = _STALL.match(metric)
        if not m or value is None:
            continue
        if metric.endswith("_not_issued") or metric.endswith("_not_issued.sum"):
            continue
        reason = m.group("a") or m.group("b") or m.group("c")
        if reason in _NOT_STALLS:
            continue
        (pct if m.group("a") else samples)[reason] = value
    if pct:
        scored = {r: v / 100.0 for r, v in pct.items()}
    else:
        total = sum(samples.values())
        scored = {r: v / total for r, v in samples.items()} if total > 0 else {}
    ranked = sorted(scored.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return [Stall(reason=r, fraction=round(f, 4)) for r, f in ranked if f > 0]


# ---------------------------------------------------------------------------------------------
# running ncu (I/O)


class NcuResult(BaseModel):
    ok: bool
    kernels: list[KernelProfile] = Field(default_factory=list)
    note: str = Field("", description="why ncu gave nothing, one line")
    version: str = ""


_NCU_FAILURES = (
    ("ERR_NVGPUCTRPERM", "ncu cannot read the GPU counters: no permission (ERR_NVGPUCTRPERM)"),
    ("LibraryNotLoaded", "ncu cannot read the GPU counters: LibraryNotLoaded (seen under gVisor, not Firecracker)"),
    ("Failed to find metric", "this ncu does not know a requested metric"),
    ("No kernels were profiled", "no kernel was profiled between cudaProfilerStart and cudaProfilerStop"),
)


def ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return (out.strip().splitlines() or [""])[-1]


def run_ncu(target: list[str], workdir: Path, timeout: float, env: dict[str, str] | None = None) -> NcuResult:
    """Profile ``target`` (a command that brackets one call with cudaProfilerStart/Stop) with ncu.

    Tries the full metric list, then once more without the stall regex if ncu refused a metric.
    Never raises: a failure is a result with ``ok=False`` and a one-line note.
    """
    ncu = ncu_path()
    if ncu is None:
        return NcuResult(ok=False, note="ncu not found on PATH or under /opt/nvidia/nsight-compute")
    version = ncu_version(ncu)
    report = workdir / "profile.ncu-rep"
    notes: list[str] = []
    for stalls in (True, False):
        try:
            run = subprocess.run(ncu_collect_cmd(ncu, report, target, stalls), capture_output=True, text=True,
                                 timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return NcuResult(ok=False, note=f"ncu did not finish within {timeout:g} s", version=version)
        log = run.stdout + run.stderr
        (workdir / f"ncu{'' if stalls else '_nostalls'}.log").write_text(log)
        notes.append(_failure(log, run.returncode))
        if report.is_file():
            break
        if "metric" not in notes[-1]:  # only an unknown metric is worth a second run
            return NcuResult(ok=False, note=notes[-1] or "ncu wrote no report", version=version)
    if not report.is_file():
        return NcuResult(ok=False, note=notes[-1] or "ncu wrote no report", version=version)
    exported = subprocess.run(ncu_export_cmd(ncu, report), capture_output=True, text=True, timeout=300)
    (workdir / "profile.csv").write_text(exported.stdout)
    kernels = parse_ncu_csv(exported.stdout)
    if not kernels:
        return NcuResult(ok=False, note=_failure(exported.stdout + exported.stderr, exported.returncode)
                         or "ncu's report holds no kernel", version=version)
    left_out = "" if stalls else f"stall reasons left out ({notes[0]})"
    return NcuResult(ok=True, kernels=kernels, note=left_out, version=version)


def _failure(log: str, code: int) -> str:
    for needle, why in _NCU_FAILURES:
        if needle in log:
            return why
    errs = [line for line in log.splitlines() if "==ERROR==" in line]
    if errs:
        return errs[0].replace("==ERROR==", "ncu error:").strip()[:200]
    return "" if code == 0 else f"ncu exited with code {code}"


def target_cmd(op: str, kernel: Path, shape: str, root: Path) -> list[str]:
    """The program ncu profiles: this Python, aka.knowledge.profile_target, one call on one shape."""
    return [sys.executable, "-m", "aka.knowledge.profile_target", op, str(kernel), shape, "--root", str(root)]


def target_env() -> dict[str, str]:
    """The target's environment: this one, with aka importable (the device runs from a checkout)."""
    env = dict(os.environ)
    pkg_root = str(Path(__file__).resolve().parents[2])  # aka/knowledge/profile.py -> the checkout
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    env.pop("TRITON_INTERPRET", None)
    return env


# ---------------------------------------------------------------------------------------------
# one profile, end to end (the CLI and the loop call this)


class ProfileError(AkaError):
    """The profile could not be taken (no GPU, the worker failed)."""

    exit_code = 2


def needs_gpu_message() -> str:
    return ("profiling needs a CUDA GPU (ncu reads hardware counters; the torch profiler times device kernels):"
            " run `aka profile` on the GPU machine")


def run_profile(op, kernel: Path, shape: str, *, timeout: float = 600.0, workdir: Path | None = None,
                use_ncu: bool = True) -> ProfileSummary:
    """Profile ``kernel`` on one shape: compile stats + torch profiler in a worker, then ncu.

    ``op`` is an aka.contract.ops.Op. Raises ProfileError when there is no GPU or the worker fails; an ncu
    failure is never an error: the summary falls back to the torch profiler and says why.
    """
    import tempfile

    import torch

    if not torch.cuda.is_available():
        raise ProfileError(needs_gpu_message())
    payload = {"op": op.name, "kernel": str(kernel.resolve()), "shape": shape, "root": str(op.root)}
    value = _worker(payload, timeout)
    notes = list(value.get("notes", []))
    compile_stats = CompileStats.model_validate(value["compile"])
    kernels: list[KernelProfile] = []
    source: Literal["ncu", "torch-profiler", "none"] = "none"
    if use_ncu:
        with tempfile.TemporaryDirectory(prefix="aka-ncu-") as tmp:
            where = workdir or Path(tmp)
            where.mkdir(parents=True, exist_ok=True)
            ncu = run_ncu(target_cmd(op.name, kernel.resolve(), shape, op.root), where, timeout, target_env())
        if ncu.ok:
            kernels, source = ncu.kernels, "ncu"
            notes += [f"ncu {ncu.version}".strip()] + ([ncu.note] if ncu.note else [])
        else:
            notes.append(f"ncu not used: {ncu.note}; durations below are the torch profiler's")
    else:
        notes.append("ncu not used (--no-ncu); durations below are the torch profiler's")
    torch_kernels = [KernelProfile(name=_short_name(k["name"]), launch=k["launch"], duration_us=k["duration_us"],
                                   source="torch-profiler") for k in value.get("torch_kernels", [])]
    if not kernels and torch_kernels:
        kernels, source = torch_kernels, "torch-profiler"
    elif torch_kernels:
        notes.append(f"torch profiler total {sum(k.duration_us or 0 for k in torch_kernels):.1f} µs (cross-check)")
    total = sum(k.duration_us or 0.0 for k in kernels) or None
    return ProfileSummary(op=op.name, shape=shape, kernel_file=str(kernel), source=source, kernels=kernels,
                          compile=compile_stats, total_us=total, floor_us=value.get("floor_us"),
                          ablations=value.get("ablations") or {}, notes=notes)


def _worker(payload: dict, timeout: float) -> dict:
    try:
        from aka.evaluate.runner import run_task
    except ImportError:  # the runner is optional until it lands: run in this process (trusted code)
        from aka.knowledge.profile_target import profile_task

        return profile_task(payload)
    res = run_task("aka.knowledge.profile_target:profile_task", payload, timeout=timeout, interpreter=False)
    if not res.ok:
        tail = (res.stderr_tail or "").strip().splitlines()[-1:] or [""]
        raise ProfileError(f"profile worker failed at {res.stage}: {res.error} {tail[0]}".strip())
    return res.value
