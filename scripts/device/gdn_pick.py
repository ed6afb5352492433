#!/usr/bin/env python3
"""Pick the gdn_prefill variant to adopt from a scripts/device/gdn_variants.py JSON (with fla in it), by
issue 17's "must" line: faster than fla on every shape, geomean >= 1.3x fla, G1 <= 400 µs (graph).

Among the variants that meet it, one whose float64 errors are no worse than fla's on every checked
shape wins (acceptance point 4), the fastest such; otherwise the fastest that meets the line; if none
does, the fastest overall. Prints a table and the winner's name on the last line; --write PATH writes
kernels/gdn_prefill/baseline.py with the winner's CONFIG literals replaced, for a gate run or an
`aka optimize` that starts from it on the device before the default is changed in git.

    python3 scripts/device/gdn_pick.py $OUT/gdn_variants.json --write /tmp/winner.py
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def summarise(rows: list[dict], ref: str = "fla", variants=None) -> dict[str, dict]:
    """Per variant (of `variants`, default all): geomean and min of ref/variant graph time, G1 graph
    µs, errors within ref's."""
    by = {}
    for r in rows:
        if variants is not None and r["variant"] not in variants and r["variant"] != ref:
            continue
        by.setdefault(r["variant"], {})[r["shape"]] = r
    base = by.get(ref, {})
    out = {}
    for name, shapes in by.items():
        if name == ref:
            continue
        common = [s for s in shapes if s in base]
        if not common:
            continue
        ratios = [base[s]["graph_us"] / shapes[s]["graph_us"] for s in common]
        # shapes past --ref-max-tokens carry NaN errors for every variant: left out of the comparison
        checked = [s for s in common if not math.isnan(base[s].get("err_o", math.nan))]
        errs_ok = all(shapes[s].get(k, math.inf) <= base[s][k] for s in checked for k in ("err_o", "err_s"))
        out[name] = {"geomean": math.exp(sum(map(math.log, ratios)) / len(ratios)), "min": min(ratios),
                     "g1_us": shapes.get("G1", {}).get("graph_us", math.inf), "errors_ok": errs_ok,
                     "shapes": len(common)}
    return out


def with_config(src: str, overrides: dict) -> str:
    """src with CONFIG's literal entries replaced, in place (a template renderer that rewrites the
    CONFIG literal would undo a CONFIG.update() appended after it)."""
    for key, value in overrides.items():
        pat = re.compile(rf'^(    "{re.escape(key)}": )([^,#\n]+)(,)', re.M)
        lit = json.dumps(value) if isinstance(value, str) else repr(value)
        src, n = pat.subn(lambda m, lit=lit: m.group(1) + lit + m.group(3), src, count=1)
        if n != 1:
            raise SystemExit(f"CONFIG entry {key!r} not found as a one-line literal in baseline.py")
    return src


def pick(summary: dict[str, dict], n_shapes: int) -> str:
    def must(v):
        return v["shapes"] == n_shapes and v["min"] >= 1.0 and v["geomean"] >= 1.3 and v["g1_us"] <= 400.0

    for pool in ([n for n, v in summary.items() if must(v) and v["errors_ok"]],
                 [n for n, v in summary.items() if must(v)], list(summary)):
        if pool:
            return max(pool, key=lambda n: summary[n]["geomean"])
    raise SystemExit("no variant with rows beside the reference")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json")
    ap.add_argument("--ref", default="fla")
    ap.add_argument("--write", default="", help="write baseline.py with the winner's CONFIG here")
    args = ap.parse_args()
    rows = json.loads(Path(args.json).read_text())
    n_shapes = len({r["shape"] for r in rows if r["variant"] == args.ref})
    from scripts.bench_gdn_prefill import VARIANTS

    summary = summarise(rows, args.ref, VARIANTS)  # competitors (flashqla) are no candidates
    for name, v in sorted(summary.items(), key=lambda kv: -kv[1]["geomean"]):
        print(f"{name:>18} geomean {v['geomean']:.3f}x min {v['min']:.3f}x G1 {v['g1_us']:.1f} us "
              f"errors<=ref {v['errors_ok']} ({v['shapes']} shapes)")
    name = pick(summary, n_shapes)
    if args.write:
        Path(args.write).write_text(with_config((ROOT / "kernels/gdn_prefill/baseline.py").read_text(),
                                                VARIANTS[name]))
    print(name)


if __name__ == "__main__":
    main()
