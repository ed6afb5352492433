"""The evaluator's own worker tasks (run in a fresh process by aka.evaluate.parent.runner): the compile
call of a candidate on every shape case, and the screen (small-set gate, then timing) in one
candidate process."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from aka.contract.shapes import every_case
from aka.evaluate.gpulock import gpu_lock
from aka.evaluate.wire import (
    BenchValue,
    CapturedLaunch,
    CompilePayload,
    CompileResult,
    Precompiled,
    ScreenPayload,
    ScreenResult,
)


def compile_worker(payload: CompilePayload) -> CompileResult:
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

    op = get_op(payload.op, Path(payload.root))
    gpu = torch.cuda.is_available() and not payload.force_cpu
    t0 = time.perf_counter()
    module = load_module(Path(payload.path))
    fn = getattr(module, op.spec.entry)
    cases = every_case(op)
    if payload.cases:  # this worker's share of the cases (the evaluator splits them)
        cases = {i: cases[i] for i in payload.cases}
    todo = sorted(cases.values(), key=op.flops) if gpu else [min(op.cases("smoke"), key=op.flops)]
    ahead: Precompiled | None = None
    # each specialisation compiled once, side by side (aka.evaluate.precompile)
    if gpu and payload.precompile:
        from aka.evaluate import precompile

        ahead = precompile.ahead(lambda case: fn(**op.inputs.make_inputs(case, 0, "cuda")), todo,
                                 payload.precompile, payload.gpu_lock)
        if ahead.tainted:  # the evaluator starts over in clean processes, the way it did without this
            return CompileResult(seconds=round(time.perf_counter() - t0, 3), precompile=ahead)
    launches: list[CapturedLaunch] = []
    for case in todo:
        inputs = op.inputs.make_inputs(case, 0, "cuda" if gpu else "cpu")
        with gpu_lock(payload.gpu_lock if gpu else None), _captured(not gpu, launches):
            fn(**inputs)
            if gpu:
                torch.cuda.synchronize()
        del inputs
    seconds = round(time.perf_counter() - t0, 3)
    # registers, spills, wgmma/TMA of the kernels just compiled (issue 9); in the interpreter an
    # explicit "unavailable: interpreter" record, so the log says why there are no numbers
    from aka.evaluate.static.compstats import collect

    t1 = time.perf_counter()
    workers = payload.precompile or 1
    stats = collect(module, interpreter=not gpu, workers=workers).model_dump() if payload.stats else None
    return CompileResult(seconds=seconds, cases=len(todo), compile_stats=stats, launches=launches,
                         stats_s=round(time.perf_counter() - t1, 3), precompile=ahead)


@contextmanager
def _captured(on: bool, into: list[CapturedLaunch]):
    """In the interpreter, note the Triton launches (aka.evaluate.static.offline_sm90 can compile them for sm_90
    later)."""
    if not on:
        yield
        return
    from aka.evaluate.static.offline_sm90 import capture

    with capture() as launches:
        yield
    into.extend(launches)


def screen_worker(payload: ScreenPayload) -> ScreenResult:
    """The screen in one candidate process; the checker (this process) judges.

    Paired with the incumbent on a GPU (payload.gate_above set): timed first, and gated on the small
    sets only when its gain over the incumbent is above gate_above (the gain the loop re-measures),
    since a candidate that cannot be promoted needs no correctness verdict: the H200's screens spent 7-17 s
    of 24-39 s gating candidates that then lost. Otherwise (the interpreter): gated first, timed only if it
    passed."""
    from aka.evaluate.checker.gate import gate_on
    from aka.evaluate.checker.sandbox import new_host

    paired = payload.gate_above is not None
    with new_host() as host:
        bench = _timed(host, payload) if paired else None
        why, slow = _cannot_win(bench, payload) if paired else ("", None)
        if why:
            return ScreenResult(gate_skipped=why, bench=bench, slow_shape=slow)
        report = gate_on(host, payload.gate())
        report.stderr_tail = host.log_tail()
        if report.passed and not paired:
            bench = _timed(host, payload)
        return ScreenResult(gate=report, bench=bench if report.passed else None)


def _timed(host, payload: ScreenPayload) -> BenchValue:
    from aka.evaluate.checker.verify import bench_judged, bench_timed

    # exclusive: the next candidates' compile workers call kernels on the GPU too (shared lock per
    # call); on the H200 (2026-11-29) timing beside them read 5-20% slow against the ABBA re-measure
    with gpu_lock(payload.gpu_lock, exclusive=True):
        sent, value = bench_timed(host, payload)
    return bench_judged(host, sent, value)


def _cannot_win(bench: BenchValue, payload: ScreenPayload) -> tuple[str, str | None]:
    """Why the candidate is not gated: its timing failed, or its gain is at most gate_above ('' to gate); and
    the shape on which it ran so much slower that the screen refuses it whatever the geomean, if one."""
    from aka.evaluate.host.harness import slow_shape
    from aka.evaluate.parent.outcomes import bench_outcome, speedup

    b = bench_outcome(bench, payload.rank)
    if b.error or not b.times_us:
        return f"timing failed: {b.error or 'no times'}", None
    gain = (speedup(b.incumbent_us, b.times_us) or 0.0) - 1
    stopped = [n for n in bench.notes if n.startswith("stopped after")]
    if payload.stop and (slow := slow_shape(bench.rows, payload.stop)):  # decide() refuses it whatever the geomean
        return f"screen gain {gain:+.2%}, but {slow[0]} at {slow[1]:.3f}x the incumbent", slow[0]
    if gain > payload.gate_above:
        return "", None
    return f"screen gain {gain:+.2%} not above {payload.gate_above:.2%}" + (f" ({stopped[0]})" if stopped else ""), None
