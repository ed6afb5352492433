"""The timing harness, run in the candidate's process: ``bench_host`` times implementations per shape,
``compare_host`` runs A against B (ABBA). The checker's entries that start that process and judge what
comes back (``bench_worker``, ``compare_worker``: the sampled timed outputs against the float64
reference, every kernel's time against the op's speed of light) are in aka.evaluate.checker.verify.

Payloads are aka.evaluate.wire's BenchPayload and ComparePayload, values its HostBench and HostComparison.
Per shape and implementation (a BenchCell): the eager timing, the CUDA-graph replay timing (labelled, or a
note why not), the peak device memory beyond inputs and outputs, achieved TFLOP/s and TB/s from the op's
cost model, and the fraction of the roofline at the device's calibrated ceilings. Before every timed call
the input buffer gets fresh values (aka.evaluate.host.rotation), so no kernel can answer from memory. On
CPU every timing is labelled interpreter/cpu and there is no roofline.
"""

from __future__ import annotations

import gc
import json
import math
import time
from pathlib import Path
from typing import Any

from aka.evaluate.host.bench import (
    BenchConfig,
    CudaTimer,
    GraphTimer,
    HostTimer,
    Timer,
    l2_bytes,
    time_fn,
    time_interleaved,
)
from aka.evaluate.host.loader import note_of, prepare
from aka.evaluate.host.rotation import Rotation
from aka.evaluate.wire import (
    BenchCell,
    BenchPayload,
    BenchRow,
    ComparePayload,
    HostBench,
    HostComparison,
    ImplRef,
    ProgressLine,
    Sample,
    StopRule,
    Timing,
    TimingPayload,
)


def _setup(payload: TimingPayload):
    """The op, the device and the config; selects the interpreter before any kernel loads on CPU."""
    import torch

    from aka.contract.ops import get_op

    gpu = torch.cuda.is_available() and not payload.force_cpu
    if not gpu:
        from aka.evaluate.host.interp import enable_interpreter

        enable_interpreter()
    cfg_raw = payload.config
    cfg = BenchConfig(**cfg_raw) if cfg_raw else (BenchConfig() if gpu else BenchConfig.for_cpu())
    if payload.graph is False:
        cfg = cfg.model_copy(update={"graph": False})
    if payload.time_cap_s:  # `aka bench --time-cap`: sampling seconds per timing (GPU)
        cfg = cfg.model_copy(update={"time_cap_s": float(payload.time_cap_s)})
    op = get_op(payload.op, None if payload.root is None else Path(payload.root))
    return op, ("cuda" if gpu else "cpu"), cfg


def _out_bytes(out: Any) -> int:
    import torch

    if isinstance(out, torch.Tensor):
        return out.numel() * out.element_size()
    if isinstance(out, (tuple, list)):
        return sum(_out_bytes(x) for x in out)
    return 0


def _peak_extra(call) -> int:
    """Peak bytes allocated during one call beyond what existed before (inputs) and what it returns."""
    import torch

    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = call()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base - _out_bytes(out)
    del out
    return max(int(extra), 0)


def _timer(device: str, ref: ImplRef, cfg: BenchConfig, cache: dict) -> Timer:
    if device == "cpu":  # competitors run native CPU torch; kernels run in Triton's interpreter
        return HostTimer("cpu" if ref.kind == "competitor" else "interpreter")
    if "eager" not in cache:
        cache["eager"] = CudaTimer(int(cfg.flush_factor * l2_bytes()))
    return cache["eager"]


def _graph(calls, cfg: BenchConfig, cache: dict, rot: Rotation | None = None, name: str = ""
           ) -> tuple[Timing | None, str]:
    if "graph" not in cache:
        cache["graph"] = GraphTimer(int(cfg.flush_factor * l2_bytes()))
    timer = cache["graph"]
    try:
        replays = _replays(timer, rot, name, calls)  # the replays write each graph's own output buffers
    except Exception as exc:  # capture refuses unjoined side streams, host syncs, ...
        import torch

        try:
            torch.cuda.synchronize()
        except Exception:  # pragma: no cover - an invalidated capture may report once more here
            pass
        first = str(exc).splitlines()[0][:160] if str(exc) else ""
        return None, f"no graph: {type(exc).__name__}: {first}"
    hooks = rot.hooks(name, "graph") if rot is not None else None
    return time_fn(replays, cfg, timer, hooks=hooks), ""


def _timed_cell(note: str, eager: Timing, costs: tuple[float, float, float | None]) -> BenchCell:
    """A timed cell's eager figures: achieved TFLOP/s and TB/s, and the roofline fraction (None without
    ceilings); the graph timing is added on a GPU."""
    flops, nbytes, floor_us = costs
    s = eager.median_us * 1e-6
    return BenchCell(note=note, eager=eager, tflops=flops / s / 1e12, tbps=nbytes / s / 1e12,
                     roofline_frac=(floor_us / eager.median_us) if floor_us else None)


def _prepare_all(refs: list[ImplRef], copies: list[dict]) -> tuple[dict[str, list], dict[str, BenchCell]]:
    """Ready-to-time calls per implementation; the ones that cannot run get their cell now."""
    ready: dict[str, list] = {}
    cells: dict[str, BenchCell] = {}
    for ref in refs:
        try:
            ready[ref.name] = [prepare(ref, inputs) for inputs in copies]
        except (ImportError, RuntimeError) as exc:  # the contract for "not available here"
            cells[ref.name] = BenchCell(skipped=f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a broken implementation fails its own cell, not the run
            cells[ref.name] = BenchCell(error=f"preparation failed: {type(exc).__name__}: {str(exc)[:300]}")
    return ready, cells


def _time_shape(refs: list[ImplRef], copies: list[dict], device: str, cfg: BenchConfig, cache: dict,
                costs: tuple[float, float, float | None], rot: Rotation) -> dict[str, BenchCell]:
    """Every implementation of one shape: eager timings interleaved (drift hits all alike), then
    peak memory and CUDA-graph replay per implementation; fresh input values before every timed call."""
    prepared, cells = _prepare_all(refs, copies)
    ready = {n: rot.wrap(n, calls) for n, calls in prepared.items()}
    by_name = {r.name: r for r in refs}
    # a fixed handful of eager calls gives the host's cost only (the op ranks on graph replay): no time warm-up
    ecfg = cfg if cfg.eager_iters is None else cfg.model_copy(
        update={"min_iters": cfg.eager_iters, "max_iters": cfg.eager_iters, "warmup_ms": 0.0})
    try:
        timings = time_interleaved(ready, ecfg, {n: _timer(device, by_name[n], cfg, cache) for n in ready},
                                   hooks={n: rot.hooks(n, "eager") for n in ready})
    except Exception:  # one failing implementation: time each alone so the others keep their numbers
        timings = {}
        for name, calls in ready.items():
            try:
                timings[name] = time_fn(calls, ecfg, _timer(device, by_name[name], cfg, cache),
                                        hooks=rot.hooks(name, "eager"))
            except Exception as exc:
                cells[name] = BenchCell(error=f"{type(exc).__name__}: {str(exc)[:300]}")
    for name in timings:
        if by_name[name].graphed:  # its last output is the graph's, which the calls below rewrite
            rot.freeze(name)
    for name, eager in timings.items():
        calls = ready[name]
        cell = _timed_cell(note_of(prepared[name][0]), eager, costs)
        if device == "cuda":
            cell.peak_extra_bytes = _peak_extra(calls[0])
            cell.graph, cell.graph_note = _graph(calls, cfg, cache, rot, name) if cfg.graph else (None, "graph off")
        cells[name] = cell
    return {r.name: cells[r.name] for r in refs}


def _sampled(payload: TimingPayload, refs: list[ImplRef], shape: str) -> set[str]:
    """Implementations whose timed outputs go back to the checker on this shape."""
    v = payload.verify
    shapes = v.shapes if v else None
    if shapes is not None and shape not in shapes:
        return set()
    names = v.impls if v else None
    return {r.name for r in refs if (names is None and r.kind == "kernel") or (names is not None and r.name in names)}


def bench_host(payload: BenchPayload) -> HostBench:
    """Time every implementation on every shape (in the candidate's process); exchange_dir is set by
    aka.evaluate.host.main."""
    import torch

    op, device, cfg = _setup(payload)
    refs = payload.impls
    notes: list[str] = []
    ceil = payload.ceilings  # measured by the checker (aka.evaluate.checker.verify.bench_timed), never here
    notes += payload.ceilings_notes
    rows: list[BenchRow] = []
    cache: dict = {}
    samples: list[Sample] = []
    cases = op.cases(payload.shapes)
    first = list(payload.first)  # shapes that stopped earlier screens: timed first (stable)
    cases = sorted(cases, key=lambda c: first.index(c.id) if c.id in first else len(first))
    t_start = time.monotonic()
    if device == "cuda" and payload.precompile:
        notes += precompile_kernels(op, refs, cases, payload.precompile)
    for i, case in enumerate(cases):
        flops, nbytes = op.flops(case), op.min_bytes(case)
        floor = None
        if ceil:
            floor = ceil.floor_us(flops, nbytes)
        seeds = [payload.seed + i for i in range(cfg.input_copies)]
        copies = [op.inputs.make_inputs(case, s, device) for s in seeds]
        rot = _rotation(op, case, copies, seeds, payload, i, device, cfg.min_iters, _sampled(payload, refs, case.id))
        results = _time_shape(refs, copies, device, cfg, cache, (flops, nbytes, floor), rot)
        samples += rot.finish(Path(payload.exchange_dir), f"s{i}") if payload.exchange_dir else []
        rows.append(BenchRow(shape=case.id, params=case.describe(), flops=flops, bytes=nbytes, floor_us=floor,
                             results=results))
        _progress(payload.progress_path, rows[-1], i + 1, len(cases), device, time.monotonic() - t_start)
        del copies
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        if (why := losing(rows, payload.stop)) and i + 1 < len(cases):
            notes.append(f"stopped after {i + 1} of {len(cases)} shapes: {why}")
            break
    return HostBench(op=op.name, device=_device_name(device), kind="gpu" if device == "cuda" else "interpreter",
                     impls=[r.name for r in refs], ceilings=ceil, config=cfg.model_dump(), notes=notes, rows=rows,
                     samples=samples)


def compiled_once(refs: list[ImplRef]) -> list[ImplRef]:
    """The kernel implementations whose compiles differ: one per (module, CONFIG values); competitors bring
    their own compilers (fla autotunes, and a skipped launch inside its autotuner would be timed). Pure."""
    out: dict[tuple[str, str], ImplRef] = {}
    for r in refs:
        if r.kind == "kernel":
            out.setdefault((r.path, json.dumps(r.config, sort_keys=True)), r)
    return list(out.values())


def precompile_kernels(op, refs: list[ImplRef], cases: list, workers: int) -> list[str]:
    """Every Triton specialisation the kernel implementations reach over `cases`, compiled side by side
    into Triton's disk cache before the first timing (aka.evaluate.precompile: entries run with
    every launch skipped and noted, then forked children compile). Left to the first calls, each shape's
    new specialisations compiled one after another inside the timing: on an H200 whose caches held only G3's
    and G4's kernels (2026-12-07), `aka bench gdn_prefill --impl baseline,flashqla --shapes full` spent 26-72 s
    on each shape with a new head layout or sequence count and 1-3 s on the others (FlashQLA's compiles
    included, which this does not cover; the saving has not been measured). Best effort: a specialisation
    missed here compiles at its first call, as before; the lines say what was done."""
    from aka.evaluate import precompile
    from aka.evaluate.host.loader import variant_of

    lines = []
    for ref in compiled_once(refs):
        t0 = time.monotonic()
        try:
            fn = getattr(variant_of(ref.path, ref.config), ref.function)
            ahead = precompile.ahead(lambda case, fn=fn: fn(**op.inputs.make_inputs(case, 0, "cuda")), cases,
                                     workers, None)
        except Exception as exc:  # noqa: BLE001 - its cells say what is wrong with it, if anything is
            lines.append(f"precompile {ref.name}: skipped ({type(exc).__name__}: {str(exc)[:160]})")
            continue
        took = time.monotonic() - t0
        if ahead.tainted:
            lines.append(f"precompile {ref.name}: not done, recording raised ({ahead.tainted[0]}); each "
                         "specialisation compiles at its first call")
            continue
        failed = f", {len(ahead.failed)}+ failed ({ahead.failed[0]})" if ahead.failed else ""
        lines.append(f"precompile {ref.name}: {ahead.compiled or 0} of {ahead.specs} specialisations compiled "
                     f"on {ahead.workers or 0} workers in {took:.1f} s before the first timing{failed}")
    return lines


def slow_shape(rows: list[BenchRow], stop: StopRule) -> tuple[str, float] | None:
    """The first timed shape where stop.name runs at under stop.shape_below of stop.against (in
    stop.timing), with that ratio; None without one. Pure."""
    for shape, ratio in _ratios(rows, stop) or []:
        if stop.shape_below and ratio < stop.shape_below:
            return shape, ratio
    return None


def _ratios(rows: list[BenchRow], stop: StopRule) -> list[tuple[str, float]] | None:
    out = []
    for row in rows:
        a, b = row.results.get(stop.against), row.results.get(stop.name)
        ta, tb = a and a.median(stop.timing), b and b.median(stop.timing)
        if not (ta and tb):
            return None  # an untimed cell: the checker judges it; no early verdict
        out.append((row.shape, ta / tb))
    return out


def losing(rows: list[BenchRow], stop: StopRule | None) -> str:
    """Why timing the rest is pointless: on some shape stop.name runs at under stop.shape_below of
    stop.against's speed (when given), or after at least stop.after shapes at under stop.below
    (geomean of their medians in stop.timing). Pure; '' to go on.

    A screen's early stop (aka.evaluate.checker.tasks.screen_worker): such a candidate cannot be promoted, so the
    remaining shapes would only cost GPU time. Run in the candidate's process, it can only end a
    candidate's own chance early."""
    ratios = _ratios(rows, stop) if stop else None
    if not ratios:
        return ""
    if slow := slow_shape(rows, stop):
        return f"{slow[0]}: {stop.name} at {slow[1]:.3f}x {stop.against}, under {stop.shape_below:g}x"
    if len(ratios) < stop.after:
        return ""
    g = math.exp(sum(math.log(r) for _, r in ratios) / len(ratios))
    return f"{stop.name} at {g:.3f}x {stop.against} ({stop.timing}), under {stop.below:g}x" \
        if g < stop.below else ""


def _rotation(op, case, copies, seeds, payload: TimingPayload, index: int, device: str, min_calls: int,
              sample: set[str]) -> Rotation:
    v = payload.verify  # none: no probe seed, no last call kept
    return Rotation(op, case, copies, seeds, ((v.seed or 0) if v else 0) * 1000 + index + 1, device, min_calls,
                    sample, last=v.last if v else False)


def _progress(path: str | None, row: BenchRow, done: int, total: int, device: str, elapsed_s: float) -> None:
    """One JSON line per finished shape for the parent's progress display and, should the worker not
    finish, its partial result (the result itself only arrives when every shape is done, which is
    minutes on a full set)."""
    if not path:
        return
    results = row.results
    line = ProgressLine(shape=row.shape, done=done, total=total,
                        median_us={n: r.eager.median_us for n, r in results.items() if r.eager},
                        graph_us={n: r.graph.median_us for n, r in results.items() if r.graph},
                        interpreter=device != "cuda", elapsed_s=round(elapsed_s, 1), device=_device_name(device),
                        row=row)
    with open(path, "a") as fh:
        fh.write(json.dumps(line.model_dump()) + "\n")


def _device_name(device: str) -> str:
    import torch

    if device == "cpu":
        return "cpu (Triton interpreter)"
    return torch.cuda.get_device_name(torch.cuda.current_device())


def _replays(timer: GraphTimer, rot: Rotation | None, name: str, calls: list) -> list:
    """One captured graph per input copy, each pointing the rotation (if any) at its own output
    buffers. A capture the implementation refuses (host sync, unjoined stream) raises."""
    replays, outs = [], []
    for c in calls:
        replays.append(timer.capture([c])[0])
        outs.append(rot.current(name) if rot is not None else None)
    return rot.replays(name, replays, outs) if rot is not None else replays


def compare_timing(payload: TimingPayload, device: str) -> str:
    """What the ABBA times: graph replays where the op ranks on them (on a GPU), else eager calls."""
    return "graph" if payload.rank == "graph" and device == "cuda" else "eager"


def compare_host(payload: ComparePayload) -> HostComparison:
    """A against B, ABBA-interleaved per shape on shared, freshly refreshed inputs (in the candidate's
    process); rank "graph": both replayed from CUDA graphs, as the op is ranked."""
    from aka.evaluate.host.compare import interleave, summarise

    op, device, cfg = _setup(payload)
    a, b = payload.a, payload.b
    cache: dict = {}
    kind = compare_timing(payload, device)
    timer = GraphTimer(int(cfg.flush_factor * l2_bytes())) if kind == "graph" else _timer(device, a, cfg, cache)
    samples, found = {}, []
    min_calls = 2 * max(2, cfg.min_iters // 4)  # interleave's first rounds: two calls of each per round
    for i, case in enumerate(op.cases(payload.shapes)):
        seeds = [payload.seed + j for j in range(cfg.input_copies)]
        copies = [op.inputs.make_inputs(case, s, device) for s in seeds]
        rot = _rotation(op, case, copies, seeds, payload, i, device, min_calls, _sampled(payload, [a, b], case.id))
        ready_a, ready_b = [prepare(a, x) for x in copies], [prepare(b, x) for x in copies]
        if kind == "graph":  # compiled and loaded before capture: a capture cannot load a module
            import torch

            for call in (*ready_a, *ready_b):
                call()
            torch.cuda.synchronize()
        calls_a, calls_b = rot.wrap(a.name, ready_a), rot.wrap(b.name, ready_b)
        if kind == "graph":
            calls_a, calls_b = _replays(timer, rot, a.name, calls_a), _replays(timer, rot, b.name, calls_b)
        samples[case.id] = interleave(calls_a, calls_b, cfg, timer,
                                      hooks={"A": rot.hooks(a.name, kind), "B": rot.hooks(b.name, kind)})
        if payload.exchange_dir:
            found += rot.finish(Path(payload.exchange_dir), f"c{i}")
        del copies
    return HostComparison(**dict(summarise(samples, timer.kind)), samples=found)
