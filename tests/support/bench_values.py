"""Bench values (aka.evaluate.wire.BenchValue) written with only the fields a test reads: a row as
{"shape", "results"} (its cost model zero, no floor unless given), a timing as {"median_us"} (its
quartiles the median, one sample, labelled by the value's kind)."""

from __future__ import annotations

from typing import Any

from aka.evaluate.wire import BenchValue


def _timing(t: dict[str, Any] | None, which: str, kind: str) -> dict[str, Any] | None:
    if t is None:
        return None
    label = f"gpu-{which}" if kind == "gpu" else "interpreter"
    m = t["median_us"]
    return {"kind": label, "q1_us": m, "q3_us": m, "n": 1, "stop": "max_iters", **t}


def _cell(c: dict[str, Any], kind: str) -> dict[str, Any]:
    return {**c, **{w: _timing(c[w], w, kind) for w in ("eager", "graph") if w in c}}


def bench_value(rows: list[dict[str, Any]], kind: str = "gpu") -> BenchValue:
    """The value of a bench that timed these rows (implementations in the first row's order)."""
    full = [{"params": "", "flops": 0.0, "bytes": 0.0, "floor_us": None, **r,
             "results": {n: _cell(c, kind) for n, c in r["results"].items()}} for r in rows]
    impls = list(rows[0]["results"]) if rows else []
    return BenchValue(op="op", device="test", kind=kind, impls=impls, ceilings=None, config={}, notes=[], rows=full)
