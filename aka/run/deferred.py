"""What a run measures for its report and its next plans but never before its first candidate: the
contract's competitors (fla, FlashQLA, SDPA, FlashAttention-4) and the incumbent's ncu profile.

On a fresh H200 (2026-12-03) these held `aka optimize` up for minutes before the first candidate
(fla autotunes every head layout; ncu takes 60-150 s on one shape). Both are now cached beside the
runs (runs/<op>/.cache/), keyed by what makes them valid: the device model, driver and software
versions, the competitor modules' code and the shapes (competitors), the incumbent's code (profile).
A run reads the cache at set-up and, for what it did not find, measures after its candidates, so the
next run on that machine has it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from aka.contract.files import write_atomic
from aka.evaluate.parent.evaluator import Evaluator
from aka.knowledge.incumbent_facts import profile_incumbent
from aka.run.prefetch import View
from aka.run.state import rebuild
from aka.run.store import RunStore, cache_dir
from aka.settings import OptimizeSettings

DEFERRED = "competitors deferred: timed after the candidates, cached for the next run on this device"




def competitors_key(op, device: dict[str, Any], shapes: str, timing: str) -> str:
    """The device model and software, the competitor modules' code, the shapes and the timing."""
    mods = sorted({spec.split(":")[0] for spec in op.spec.competitors.values()})
    code = [hashlib.sha256((op.root / m).read_bytes()).hexdigest()[:12] if (op.root / m).is_file() else m
            for m in mods]
    what = [*(str(device.get(k, "")) for k in ("name", "driver", "cuda", "torch", "triton")), shapes, timing, *code]
    return hashlib.sha256("|".join(what).encode()).hexdigest()[:16]


def read_competitors(cache: Path, key: str) -> tuple[dict[str, dict[str, float]], list[str]] | None:
    try:
        rec = json.loads((cache / f"competitors-{key}.json").read_text())
        return rec["times_us"], [*rec["notes"], f"cached: competitors-{key}.json ({rec.get('date', '?')})"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_competitors(cache: Path, key: str, times: dict[str, dict[str, float]], notes: list[str]) -> None:
    import time

    cache.mkdir(parents=True, exist_ok=True)
    write_atomic(cache / f"competitors-{key}.json",
                 json.dumps({"times_us": times, "notes": notes, "date": time.strftime("%Y-%m-%d %H:%M")}))


# Deferred work starts only with this much of --max-time left: a run asked to end by then ends, and the
# next run on the machine measures what this one could not.
MIN_LEFT_S = 30.0
LEFT_FOR_NEXT = "still deferred: --max-time leaves {left:.0f} s; the next run on this device measures it"


def time_left(store: RunStore, settings: OptimizeSettings) -> float | None:
    """Seconds of --max-time the run has not used (set-up and candidates), None without a limit."""
    if settings.budget.max_time_s is None:
        return None
    return settings.budget.max_time_s - rebuild(store, store.read_run()).used.elapsed_s


def after_candidates(store: RunStore, settings: OptimizeSettings, op, evaluator: Evaluator, view: View,
                     profiler=None) -> None:
    """Measure what set-up deferred (competitors, the incumbent's profile) and cache it, inside what
    --max-time leaves: on the H200 (2026-12-05) a budget-3 run under --max-time 230 timed fla for 169 s
    after its candidates (68 s), beyond the limit."""
    run = store.read_run()
    base = run.baseline
    left = time_left(store, settings)
    if left is not None and left < MIN_LEFT_S:
        if base.competitors_deferred:
            base.competitors_notes = [*base.competitors_notes, "competitors " + LEFT_FOR_NEXT.format(left=max(0, left))]
            store.update_run(baseline=base)
        if (run.profile or {}).get("deferred"):
            store.update_run(profile={**run.profile, "note": "profile " + LEFT_FOR_NEXT.format(left=max(0, left))})
        return
    if base.competitors_deferred:
        view.update(stage="time the competitors (deferred: for the report and the next run)")
        cap = settings.competitors_timeout_s if left is None else min(settings.competitors_timeout_s, left)
        times, notes = evaluator.competitors(base.shapes, timeout=cap)
        key = base.competitors_deferred
        if times:
            write_competitors(cache_dir(store.path.parent.parent, op.name), key, times, notes)
        base.competitors_us, base.competitors_notes, base.competitors_deferred = times, notes, None
        store.update_run(baseline=base)
    if (run.profile or {}).get("deferred"):
        view.update(stage="profile the incumbent (deferred: for the next run's plans)")
        profile_incumbent(store, op, settings, profiler, cache_dir(store.path.parent.parent, op.name), now=True)
