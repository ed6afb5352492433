"""What the Plan stage is told about the incumbent (issue 9): a profile on its worst shape, taken
once per run and kept in run.json, and the evidence items derived from it and from compile stats.

The profile is paid for once per incumbent and device (cached beside the runs), after a run's
candidates, never before the first one, on the shape where the incumbent is furthest
from its roofline (the baseline bench's fractions; the slowest shape when there are none), with
kernel durations (torch profiler, no counters) on the slowest shapes besides. A
resumed run reads it back instead of profiling again. A failed profile is a note, never a failed
run: planning then goes on from the incumbent's compile statistics alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from aka.records import Attempt, RunBaseline, RunRecord
from aka.settings import OptimizeSettings

CPU_NOTE = "no profile: CPU interpreter"
OFF_NOTE = "no profile: --no-profile"


class RunRecords(Protocol):
    """The part of aka.run.store.RunStore used here (knowledge comes before the run stage)."""

    def read_run(self) -> dict[str, Any]: ...

    def update_run(self, **fields: Any) -> None: ...


def worst_shape(baseline: RunBaseline) -> str:
    """The shape furthest from its roofline; without fractions (no calibration), the slowest one."""
    fracs = baseline.incumbent_roofline
    if fracs:
        return min(fracs, key=lambda s: (fracs[s], s))
    times = baseline.incumbent_us
    return max(times, key=lambda s: (times[s], s))


def slowest_shapes(baseline: RunBaseline, k: int, exclude: str = "") -> list[str]:
    """The k shapes where the incumbent takes longest, the profiled one left out."""
    times = baseline.incumbent_us
    return [s for s in sorted(times, key=lambda s: (-times[s], s)) if s != exclude][:k]


def kernel_times(kernels) -> dict[str, float]:
    """Kernel name -> µs in one call, summed over its launches."""
    out: dict[str, float] = {}
    for k in kernels:
        out[k.name] = round(out.get(k.name, 0.0) + (k.duration_us or 0.0), 2)
    return out


DEFERRED_NOTE = ("profile deferred: taken after the candidates, never before the first one, and cached for the "
                 "next run of this kernel on this device")


def profile_key(run: RunRecord) -> str:
    """What a cached profile is valid for: the incumbent's code on this device model and software."""
    dev = run.device
    what = [run.incumbent.hash, *(str(getattr(dev, k) or "") for k in ("name", "driver", "cuda", "torch", "triton"))]
    return hashlib.sha256("|".join(what).encode()).hexdigest()[:16]


def _cached(cache_dir: Path | None, key: str) -> dict[str, Any] | None:
    if cache_dir is None:
        return None
    try:
        rec = json.loads((cache_dir / f"profile-{key}.json").read_text())
    except (OSError, ValueError):  # absent, or a torn write: profile again
        return None
    return rec if isinstance(rec, dict) and "summary" in rec else None


def profile_incumbent(store: RunRecords, op, settings: OptimizeSettings,
                      profiler: Callable[..., Any] | None = None, cache_dir: Path | None = None,
                      now: bool = False) -> dict[str, Any]:
    """run.json["profile"]: read back on resume, from the cache when this incumbent was profiled on this
    device before, else deferred. With ``now`` (after the candidates), a deferred profile is taken and
    cached. The ncu profile costs ~60-150 s on the H200; before the first candidate it held every new
    run up by that much (issue 36), so it is never taken there."""
    run = store.read_run()
    have = run.profile
    if have is not None and not (now and have.get("deferred")):
        return have
    if settings.interpreter:
        rec: dict[str, Any] = {"note": CPU_NOTE, "summary": None}
    elif not settings.profile:
        rec = {"note": OFF_NOTE, "summary": None}
    elif (hit := _cached(cache_dir, profile_key(run))) is not None:
        rec = {**hit, "note": (hit.get("note") or "") + f" (cached: profile-{profile_key(run)}.json)"}
    elif not now:
        rec = {"note": DEFERRED_NOTE, "summary": None, "deferred": True}
    else:
        rec = _take(run, op, settings, profiler)
        if cache_dir is not None and (rec["summary"] or rec["kernel_times"]):
            cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = cache_dir / f".profile-{profile_key(run)}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(rec))
            os.replace(tmp, cache_dir / f"profile-{profile_key(run)}.json")
    store.update_run(profile=rec)
    return rec


def _take(run: RunRecord, op, settings: OptimizeSettings, profiler: Callable[..., Any] | None) -> dict[str, Any]:
    if profiler is None:
        from aka.knowledge.profile import run_profile as profiler
    shape, t0 = worst_shape(run.baseline), time.monotonic()
    path = Path(run.incumbent.path)
    rec = {"shape": shape, "hash": run.incumbent.hash, "summary": None, "note": "", "kernel_times": {}}
    try:
        rec["summary"] = profiler(op, path, shape, timeout=settings.profile_timeout_s).model_dump()
    except Exception as exc:  # ProfileError, an ncu or worker surprise: the run goes on without it
        rec["note"] = f"no profile: {type(exc).__name__}: {exc}"[:300]
    # where the time goes on the slowest shapes: kernel durations only (torch profiler, seconds each)
    for slow in slowest_shapes(run.baseline, settings.profile_slow_shapes, exclude=shape):
        try:
            summ = profiler(op, path, slow, timeout=settings.profile_timeout_s, use_ncu=False)
            rec["kernel_times"][slow] = kernel_times(summ.kernels)
        except Exception as exc:  # as above: a note, and the plans go on without these figures
            rec.setdefault("kernel_times_notes", []).append(f"{slow}: {type(exc).__name__}: {exc}"[:200])
    rec["seconds"] = round(time.monotonic() - t0, 3)
    return rec


def incumbent_evidence(run: RunRecord, history: list[Attempt]) -> list[dict[str, Any]]:
    """Evidence items (aka.knowledge.evidence.Evidence dicts) about the current incumbent.

    The starting incumbent: its profile (which carries its compile stats), else the compile stats
    prepare_run recorded. A promoted candidate: its own compile stats from its attempt record (the
    profile was of another kernel).
    """
    from aka.evaluate.static.compstats import CompileStats
    from aka.knowledge.evidence import evidence_for_plan
    from aka.knowledge.ncu_report import ProfileSummary

    promoted = [r for r in history if r.promoted]
    summary = None if promoted else (run.profile or {}).get("summary")
    if summary:
        fracs = run.baseline.incumbent_roofline
        items = evidence_for_plan(ProfileSummary.model_validate(summary), fracs)
    else:
        stats = (getattr(promoted[-1].compile, "compile_stats", None) if promoted
                 else run.baseline.incumbent_compile)
        if not stats:
            return []
        cs = CompileStats.model_validate(stats)
        items = evidence_for_plan(ProfileSummary(op=run.op, shape="", kernel_file="", source="none",
                                                 compile=cs))
    return [e.model_dump() for e in items]
