"""Twice-timed stability check (issue 4 acceptance), run on the device; never imported by aka/.

Times the op's baseline twice in one process (``--impl baseline,baseline``: the second is labelled
baseline#2), shape by shape, and prints the per-shape spread |m1 - m2| / min(m1, m2) of the eager
medians. Shapes over 50 µs must agree within 2%. With --abba it also runs the baseline against
itself interleaved (aka.evaluate.host.compare) and prints the geomean ratio with its 95% interval, which must
contain 1.

    PYTHONPATH=$PWD python3 scripts/device/bench_stability.py [--op gdn_prefill] [--shapes full] [--abba] [--json F]
Exit status 1 when a shape over 50 µs spreads by 2% or more.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from aka.contract.ops import get_op  # noqa: E402
from aka.evaluate.checker.verify import bench_worker, compare_worker  # noqa: E402
from aka.evaluate.parent.impls import resolve  # noqa: E402
from aka.evaluate.wire import BenchPayload, ComparePayload  # noqa: E402

LIMIT, MIN_US = 0.02, 50.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="gdn_prefill")
    ap.add_argument("--shapes", default="full")
    ap.add_argument("--abba", action="store_true", help="also compare the baseline with itself, interleaved")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    op = get_op(args.op)
    refs, _ = resolve(op, ["baseline", "baseline"])
    res = bench_worker(BenchPayload(op=op.name, impls=refs, shapes=args.shapes, graph=False))
    print(f"{op.name} on {res.device} ({res.kind}): baseline timed twice in one process")
    print(f"{'shape':8} {'first µs':>10} {'second µs':>10} {'spread':>8} {'n1/n2':>9}  verdict")
    worst, failed = 0.0, []
    for row in res.rows:
        e1 = row.results["baseline"].eager
        e2 = row.results["baseline#2"].eager
        m1, m2 = e1.median_us, e2.median_us
        spread = abs(m1 - m2) / min(m1, m2)
        judged = min(m1, m2) > MIN_US
        verdict = ("ok" if spread < LIMIT else "FAIL") if judged else f"(under {MIN_US:.0f} µs, not judged)"
        if judged:
            worst = max(worst, spread)
            if spread >= LIMIT:
                failed.append(row.shape)
        print(f"{row.shape:8} {m1:10.1f} {m2:10.1f} {spread:8.2%} {e1.n:>4}/{e2.n:<4}  {verdict}")
    print(f"worst spread over {MIN_US:.0f} µs: {worst:.2%} (limit {LIMIT:.0%}); failing: {failed or 'none'}")
    out = {"bench": res.model_dump()}
    if args.abba:
        cmp = compare_worker(ComparePayload(op=op.name, a=refs[0], b=refs[1], shapes=args.shapes, graph=False))
        print(f"ABBA baseline vs itself: geomean {cmp.geomean:.4f} [{cmp.ci_low:.4f}, {cmp.ci_high:.4f}]")
        for s in cmp.shapes:
            print(f"  {s.shape:8} ratio {s.ratio:.4f} ±{s.noise:.2%} over {s.rounds} rounds")
        out["abba"] = cmp.model_dump()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
