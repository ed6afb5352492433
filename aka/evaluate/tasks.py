"""The evaluator's own worker tasks (run in a fresh process by aka.evaluate.runner): the compile
call of a candidate on every shape case, and the screen (small-set gate, then timing) in one
candidate process."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aka.contract.shapes import every_case
from aka.evaluate.gpulock import gpu_lock


def compile_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """Import the candidate and call it once per shape case, untimed: Triton compiles here.

    On a GPU every case of every set is called, because each distinct set of constexprs (head
    counts, sequence counts, initial state) is its own compilation; the gate and the bench then
    load the kernels from Triton's disk cache instead of compiling while the GPU waits. Each call
    holds a shared lock on `gpu_lock`, so none lands inside an ABBA comparison (exclusive lock).
    In the interpreter there is nothing to compile: one small call proves the module runs.
    """
    import time

    import torch

    from aka.contract.ops import get_op, load_module

    op = get_op(payload["op"], Path(payload["root"]))
    gpu = torch.cuda.is_available() and not payload.get("force_cpu")
    t0 = time.perf_counter()
    module = load_module(Path(payload["path"]))
    fn = getattr(module, op.spec.entry)
    cases = every_case(op)
    if payload.get("cases"):  # this worker's share of the cases (the evaluator splits them)
        cases = {i: cases[i] for i in payload["cases"]}
    todo = sorted(cases.values(), key=op.flops) if gpu else [min(op.cases("smoke"), key=op.flops)]
    launches: list[dict[str, Any]] = []
    for case in todo:
        inputs = op.inputs.make_inputs(case, 0, "cuda" if gpu else "cpu")
        with gpu_lock(payload.get("gpu_lock") if gpu else None), _captured(not gpu, launches):
            fn(**inputs)
            if gpu:
                torch.cuda.synchronize()
        del inputs
    seconds = round(time.perf_counter() - t0, 3)
    # registers, spills, wgmma/TMA of the kernels just compiled (issue 9); in the interpreter an
    # explicit "unavailable: interpreter" record, so the log says why there are no numbers
    from aka.evaluate.compstats import collect

    stats = collect(module, interpreter=not gpu).model_dump()
    return {"seconds": seconds, "cases": len(todo), "compile_stats": stats, "launches": launches}


@contextmanager
def _captured(on: bool, into: list[dict[str, Any]]):
    """In the interpreter, note the Triton launches (aka.evaluate.offline_sm90 can compile them for sm_90 later)."""
    if not on:
        yield
        return
    from aka.evaluate.offline_sm90 import capture

    with capture() as launches:
        yield
    into.extend(launches)


def screen_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """Gate on the small sets, then (only if it passed) time every bench shape, in one candidate
    process; the checker (this process) judges both."""
    from aka.evaluate.gate import gate_on
    from aka.evaluate.sandbox import new_host
    from aka.evaluate.verify import bench_judged, bench_timed

    with new_host() as host:
        report = gate_on(host, {**payload, "shapes": payload["gate_shapes"]})
        report.stderr_tail = host.log_tail()
        if not report.passed:
            return {"gate": report.model_dump(), "bench": None}
        # exclusive: the next candidates' compile workers call kernels on the GPU too (shared lock per
        # call); on the H200 (2026-11-29) timing beside them read 5-20% slow against the ABBA re-measure
        with gpu_lock(payload.get("gpu_lock"), exclusive=True):
            sent, value = bench_timed(host, payload)
        return {"gate": report.model_dump(), "bench": bench_judged(host, sent, value)}
