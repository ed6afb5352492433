#!/usr/bin/env python3
"""Run the whole red team (tests/evaluate/redteam.py) and record what rejected each kernel.

  python3 scripts/red_team.py [--ops fa4_decode,...] [--only ID,...] [--out DIR] [--fast]

On CPU each kernel goes through the gate on smoke+edge in the interpreter (``--fast``: only the
shapes its test names); on a GPU through smoke+edge+full; the timing cheats through the
optimize loop's screen (gate on smoke, timing on the bench shapes: smoke on CPU, full on a GPU).
One JSON line per kernel is appended to DIR/red_team.jsonl as it finishes, and DIR/red_team.md
gets the table, so a run cut off at a time limit keeps what it found. Exit 0 when every kernel was
rejected as its class says (stage and reason), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "gate")]

import redteam  # noqa: E402

from aka.contract.ops import get_op  # noqa: E402
from aka.evaluate.parent.check import check_kernel  # noqa: E402


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def run_one(k, folder: Path, gpu: bool, fast: bool) -> dict:
    path = redteam.materialise(k, folder)
    op = get_op(k.op)
    t0 = time.monotonic()
    if k.where == "screen":
        from aka.evaluate.parent.evaluator import RealEvaluator
        from aka.settings import OptimizeSettings

        ev = RealEvaluator(op, OptimizeSettings(op=k.op, interpreter=not gpu))
        gate, bench = ev.screen(path, ["smoke"], 2, 0, "full" if gpu else "smoke")
        stage = "gate" if gate.error else "bench"
        reason = gate.error or (bench.error if bench is not None else "no timing")
        ok = bool(re.search(k.expect, reason))
    else:
        shapes = k.shapes if fast else ("smoke,edge,full" if gpu else "smoke,edge")
        rep = check_kernel(op, path, shapes=shapes, rounds=2, timeout=600, fail_fast=True,
                           interpreter=not gpu, policy=k.policy)
        stage, reason = rep.stage or "passed", rep.reason
        # on a GPU an out-of-bounds read faults the device where the interpreter crashed
        stages = {k.stage} | ({"device-fault", "check"} if gpu and k.stage == "crash" else set())
        ok = not rep.passed and stage in stages and (bool(re.search(k.expect, reason)) or gpu)
    return {"op": k.op, "id": k.id, "class": k.cls, "where": k.where, "policy_bypassed": not k.policy,
            "stage": stage, "reason": reason[:300], "as_expected": ok, "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="red-team-out")
    ap.add_argument("--fast", action="store_true", help="only the shapes each kernel's test names")
    args = ap.parse_args(argv)
    gpu = _gpu()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kernels = [k for k in redteam.ALL if (gpu or not k.gpu_only)
               and (not args.ops or k.op in args.ops.split(",")) and (not args.only or k.id in args.only.split(","))]
    rows = []
    (out / "red_team.jsonl").write_text("")
    for k in kernels:
        row = run_one(k, out, gpu, args.fast)
        rows.append(row)
        with open(out / "red_team.jsonl", "a") as fh:
            fh.write(json.dumps(row) + "\n")
        mark = "ok " if row["as_expected"] else "BAD"
        print(f"{mark} {k.op:<12} {k.id:<24} {row['stage']:<12} {row['seconds']:>6.1f}s  {row['reason'][:90]}",
              flush=True)
        _table(out / "red_team.md", rows, gpu)
    bad = [r for r in rows if not r["as_expected"]]
    print(f"{len(rows) - len(bad)}/{len(rows)} rejected as expected ({'GPU' if gpu else 'CPU interpreter'})")
    return 1 if bad else 0


def _table(path: Path, rows: list[dict], gpu: bool) -> None:
    lines = [f"Red team, {'GPU' if gpu else 'CPU interpreter'}, {time.strftime('%Y-%m-%d %H:%M')}", "",
             "| op | kernel | class | past the policy | rejected by | reason | as expected |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        reason = r["reason"].replace("|", "/")[:140]
        lines.append(f"| {r['op']} | {r['id']} | {r['class']} | {'yes' if r['policy_bypassed'] else 'no'} | "
                     f"{r['where']}: {r['stage']} | {reason} | {'yes' if r['as_expected'] else 'NO'} |")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
