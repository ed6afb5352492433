"""An Nsight Compute report read back: the metrics asked for, the command lines that collect and
export them, and the parsing of the CSV export into typed per-kernel numbers (wide and long
layouts; a metric ncu could not collect is None and named in ``missing``, never 0). Running ncu
and the profiled process is aka.knowledge.profile.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from aka.evaluate.static.compstats import CompileStats

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
    return KernelProfile(name=short_name(name), launch=launch, stalls=top_stalls(metrics), missing=missing,
                         source="ncu", **fields)


def short_name(name: str) -> str:
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
