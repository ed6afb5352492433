"""fa4_decode's per-process timing modes (issue 36), outside the loop: the set-up's timing path.

Times the shipped promoted kernel beside the baseline through aka's own set-up path
(RealEvaluator.bench: the checker, the candidate's process, the screen's stop rule) on the full set,
and prints the shapes that move between processes. Run it several times, each a fresh process:

    for m in screen nowarm screen nowarm; do python3 scripts/device/timing_modes.py $m; done

`screen`: the loop's configuration (8 eager calls, stop rule from 8 samples checked every 4, 0.25 s
cap, BenchConfig.warmup_ms of calls first); `nowarm`: the same without the time warm-up (three calls
per input copy only, as before); `bench`: aka bench's (BenchConfig defaults, 1 s cap). Without the time
warm-up, on the H200 (2026-12-04), D10-q1 read 275 or 304 µs by process, D10-q4 312 or 330, D6-q1 185
or 196 (docs/perf/loop.md).
"""

from __future__ import annotations

import sys

from aka.contract.ops import get_op
from aka.evaluate.host.bench import BenchConfig
from aka.evaluate.parent.evaluator import RealEvaluator
from aka.settings import OptimizeSettings

SHAPES = ("D10-q1", "D1-q4", "D6-q1", "D10-q4", "D2-q4", "D9-q1")


def main(mode: str) -> None:
    op = get_op("fa4_decode")
    ev = RealEvaluator(op, OptimizeSettings(op="fa4_decode"))
    if mode == "bench":
        ev.screen_cfg = BenchConfig(time_cap_s=1.0).model_dump(exclude_none=True)
    elif mode == "nowarm":  # as before the time warm-up: three untimed calls per input copy only
        ev.screen_cfg = {**ev.screen_cfg, "warmup_ms": 0.0}
    elif mode != "screen":
        raise SystemExit(f"unknown mode {mode!r}: screen, nowarm or bench")
    b = ev.bench(op.path("promoted"), "full", beside=op.path("baseline"))
    if b.error:
        raise SystemExit(f"timing failed: {b.error}")
    print(mode, " ".join(f"{s}:{b.times_us[s]:.1f}" for s in SHAPES), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "screen")
