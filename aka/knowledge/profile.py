"""Profile summaries: Nsight Compute (ncu) on one shape, condensed into a few typed numbers per kernel.

One profile = the candidate called once on one shape, after warm-up, between cudaProfilerStart and
cudaProfilerStop (``aka.knowledge.profile_target``), under ``ncu --profile-from-start off`` so that
compilation and warm-up launches are never profiled. ``--clock-control none`` because the device's
clocks are left alone (METHOD.md) and the timings must be comparable with ``aka bench``.

The report is exported with ``--page raw --csv --print-units base`` and parsed by
aka.knowledge.ncu_report.parse_ncu_csv, which also reads the long ``Metric Name/Metric Unit/Metric Value`` layout and
tolerates missing metrics ("n/a", absent columns): a metric ncu could not collect is None and
named in ``missing``, never 0. Where ncu is absent or cannot read the counters (gVisor:
"LibraryNotLoaded"; no permission: ERR_NVGPUCTRPERM) the summary says why and carries the torch
profiler's per-kernel durations instead (``source="torch-profiler"``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from aka.errors import AkaError
from aka.evaluate.static.compstats import CompileStats
from aka.knowledge.ncu_report import (
    KernelProfile,
    ProfileSummary,
    ncu_collect_cmd,
    ncu_export_cmd,
    ncu_path,
    parse_ncu_csv,
    short_name,
)

TIMEOUT_S = 600.0  # `aka profile`: seconds for the worker and for ncu, each (a loop's profile has its own cap)


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


def run_profile(op, kernel: Path, shape: str, *, timeout: float = TIMEOUT_S, workdir: Path | None = None,
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
        with tempfile.TemporaryDirectory(prefix=f"aka-ncu-{os.getpid()}-") as tmp:
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
    torch_kernels = [KernelProfile(name=short_name(k["name"]), launch=k["launch"], duration_us=k["duration_us"],
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
    from aka.evaluate.parent import door

    res = door.run("aka.knowledge.profile_target:profile_task", payload, timeout=timeout, interpreter=False)
    if not res.ok:
        raise ProfileError(door.failure(res, "profile"))
    return res.value
