"""The loop's one door to the measuring stages: static check, compile, gate, bench, compare.

The loop talks to an Evaluator and never imports a stage. RealEvaluator runs every stage that
executes candidate code in a fresh worker process (through aka.evaluate.parent.door) and labels where timings
came from; tests hand run_loop() a fake evaluator object directly. There is no flag or setting
that swaps the evaluator from the CLI, so interpreter timings can never reach a promotion.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from aka.contract.shapes import every_case
from aka.evaluate.gpulock import gpu_lock
from aka.evaluate.host.bench import BenchConfig
from aka.evaluate.parent import door
from aka.evaluate.parent.outcomes import (
    BenchOutcome,
    CompareOutcome,
    StageOutcome,
    bench_outcome,
    compare_outcome,
    eager_medians,
    gate_record,
)
from aka.evaluate.static.compstats import CompileStats
from aka.evaluate.static.compstats import merge as merge_stats
from aka.evaluate.wire import (
    BenchPayload,
    BenchValue,
    CapturedLaunch,
    ComparePayload,
    Comparison,
    CompilePayload,
    CompileResult,
    GatePayload,
    GateReport,
    ImplRef,
    OfflinePayload,
    ProgressLine,
    ScreenPayload,
    ScreenResult,
    StopRule,
    VerifySettings,
)
from aka.records import GateRecord
from aka.settings import OptimizeSettings


def map_workers(fn, items: list) -> list:
    """fn over items on one daemon thread each, results in order; the first exception is re-raised.

    Not a ThreadPoolExecutor: Python's exit handler joins its threads, so a run that stopped while a
    prefetched candidate was still compiling waited for that compile before the process could exit
    (seen on the H200). The worker processes behind fn die with the parent (aka.evaluate.lifeline)."""
    out: list = [None] * len(items)
    errs: list = [None] * len(items)

    def one(i: int, item) -> None:
        try:
            out[i] = fn(item)
        except BaseException as exc:  # re-raised in the caller's thread below
            errs[i] = exc

    threads = [threading.Thread(target=one, args=(i, x), daemon=True) for i, x in enumerate(items)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errs:
        if e is not None:
            raise e
    return out


class Evaluator(Protocol):
    rank: str  # the timing candidates are ranked on: "eager" or "graph" (the contract's rank_timing on a GPU)

    def device(self) -> dict[str, Any]: ...
    def check(self, source: str) -> StageOutcome: ...
    def compile(self, path: Path, cases: list[str] | None = None, stats: bool = True) -> StageOutcome: ...
    def gate(self, path: Path, sets: list[str], rounds: int, seed: int) -> GateRecord: ...
    def screen(self, path: Path, sets: list[str], rounds: int, seed: int,
               shapes: str, incumbent: Path | None = None) -> tuple[GateRecord, BenchOutcome | None]: ...
    def bench(self, path: Path, shapes: str, beside: Path | None = None,
              names: tuple[str, str] = ("candidate", "incumbent")) -> BenchOutcome: ...
    def compare(self, incumbent: Path, candidate: Path, shapes: str) -> CompareOutcome: ...
    def competitors(self, shapes: str, timeout: float | None = None) -> tuple[dict[str, dict[str, float]], list[str]]:
        ...


class RealEvaluator:
    """check -> compile -> gate -> bench -> compare through aka.evaluate's policy, gate and bench_worker.

    On a GPU the screen (small-shape gate + full-shape timing) runs in one worker, so each
    candidate pays one process start for it; timings use short sampling caps, and only the
    candidates the screen calls promising get the full-set gate and the ABBA comparison.
    """

    def __init__(self, op, settings: OptimizeSettings):
        self.op = op
        self.root = op.root
        self.timeout = settings.timeout_s
        self.competitors_timeout = settings.competitors_timeout_s
        self.interpreter = settings.interpreter
        self.cuda = settings.llm.lang == "cuda"  # only a --lang cuda run may build CUDA extensions
        gpu = not self.interpreter
        # the timing candidates are ranked on (the contract's rank_timing); the interpreter times eagerly
        self.rank = op.spec.rank_timing if gpu else "eager"
        graph = self.rank == "graph"
        # three input copies, as `aka bench`: gdn_prefill's time depends on each copy's gates (the context-
        # parallel warm-up decisions), so a median over two copies read G10 12% off bench's (H200, 2026-12-03)
        self.screen_cfg = _bench_cfg(settings.screen_time_cap_s, graph, min_iters=8, max_iters=60) if gpu else None
        self.compare_cfg = _bench_cfg(settings.compare_time_cap_s, graph) if gpu else None
        # one lock per GPU: compile calls (shared) stay out of ABBA comparisons (exclusive) on that device
        self.gpu_lock = Path(tempfile.gettempdir()) / f"aka-gpu-{timing_device()}.lock"
        self.split = max(1, settings.compile_split)
        self._compiling, self._lock = 0, threading.Lock()
        self.screen_verify = settings.screen_verify_shapes
        self.gate_above = settings.rules.remeasure_above
        rules = settings.rules  # a shape this much slower in the screen fails decide()'s margin after the ABBA too
        self.shape_below = None if rules.allow_shape_regression else 1 - rules.shape_margin - SCREEN_SLACK
        self.margin = rules.shape_margin
        self.first: list[str] = []  # shapes that refused recent candidates: the screen times them first
        # set by a command that shows progress: one call per shape bench() finishes (a bench_worker
        # progress record: shape, done, total, median_us, elapsed_s)
        self.on_shape: Callable[[ProgressLine], None] | None = None
        if gpu and settings.spare_workers:  # every stage below then starts in a ready process
            door.keep_ready(settings.spare_workers, self.interpreter)

    def _cuda_without_gpu(self, path: Path) -> bool:
        from aka.evaluate.static.cudacheck import is_cuda_candidate

        return self.cuda and self.interpreter and is_cuda_candidate(path.read_text())

    def _where(self) -> dict[str, Any]:
        """The fields every payload of this evaluator starts with: the op, its root, the interpreter choice."""
        return {"op": self.op.name, "root": str(self.root), "force_cpu": self.interpreter}

    def _kernel(self, name: str, path: Path) -> ImplRef:
        return ImplRef(name=name, kind="kernel", path=str(path), function=self.op.spec.entry)

    def device(self) -> dict[str, Any]:
        from aka.hardware import device_record

        return device_record(self.interpreter)

    def check(self, source: str) -> StageOutcome:
        from aka.evaluate.static.policy import check_source

        res = check_source(source, self.op.spec, allow_cuda_extension=self.cuda)
        return StageOutcome(res.ok, res.message)

    def compile(self, path: Path, cases: list[str] | None = None, stats: bool = True) -> StageOutcome:
        """Compile every specialisation `path` reaches over `cases` (shape ids; default every case of every
        set: what the gate and the timing will launch); `stats`: read the kernels' registers and SASS."""
        if self._cuda_without_gpu(path):  # cannot import it here; nvcc still finds compile errors
            from aka.evaluate.static.cudacheck import nvcc_compile

            ok, err = nvcc_compile(path.read_text(), self.timeout)
            return StageOutcome(ok, err, {"nvcc_only": True})
        # on a GPU the specialisations are compiled side by side: `compile_split` processes, more while few
        # compiles run: every core for one alone (the set-up's incumbent, which everything after waits for), half
        # of them shared among several
        ids = sorted(cases or every_case(self.op))
        with self._lock:
            cores = (os.cpu_count() or 1) // (1 if self._compiling == 0 else 2)
            split = max(self.split, cores // (self._compiling + 1))
            self._compiling += 1
        parts = [[]] if self.interpreter else [p for p in (ids[i::split] for i in range(split)) if p]
        payloads = [CompilePayload(**self._where(), path=str(path), gpu_lock=str(self.gpu_lock), cases=p, stats=stats)
                    for p in parts]
        t0 = time.monotonic()
        try:
            results = self._compile_calls(payloads, split)
        finally:
            with self._lock:
                self._compiling -= 1
        errors = [err for ok, _, err in results if not ok]
        values = [v for ok, v, _ in results if ok and v is not None]
        seconds = max((v.seconds for v in values), default=0.0)
        # seconds: the calls' own work; call_s adds taking (or starting) their processes; stats_s: reading the
        # kernels' registers and SASS after the work
        detail = {"seconds": seconds, "workers": len(results), "call_s": round(time.monotonic() - t0, 3),
                  "stats_s": max((v.stats_s or 0.0 for v in values), default=0.0)}
        if len(results) == 1 and values and (ahead := values[0].precompile):
            detail["precompile"] = ahead.model_dump(exclude_none=True)
        stats = [CompileStats.model_validate(v.compile_stats) for v in values if v.compile_stats is not None]
        if stats:
            detail["compile_stats"] = merge_stats(stats).model_dump()
        launches = [x for v in values for x in v.launches]
        if launches:
            detail["launches"] = launches
        return StageOutcome(not errors, errors[0] if errors else "", detail)

    def _compile_calls(self, payloads: list[CompilePayload], split: int
                       ) -> list[tuple[bool, CompileResult | None, str]]:
        """The compile calls. On a GPU (Triton candidates) one call compiles every specialisation once on
        `split` forked children, then runs every case (aka.evaluate.precompile). If its record was tainted
        or its process died (which the record's forks or host code on unwritten outputs could cause: not
        the candidate's fault), the calls split the cases as before, and theirs is the verdict."""
        def call(p: CompilePayload) -> tuple[bool, CompileResult | None, str]:
            ok, value, err = door.call("aka.evaluate.checker.tasks:compile_worker", p, self.timeout, self.interpreter)
            return ok, CompileResult.model_validate(value) if ok else None, err

        if not (self.interpreter or self.cuda):  # a CUDA candidate builds its extension on import
            whole = payloads[0].model_copy(update={"cases": sorted(c for p in payloads for c in p.cases or []),
                                                   "precompile": split})
            ok, value, err = call(whole)
            died = not ok and err.split(":", 1)[0] in ("crash", "oom", "timeout")
            if not (died or (ok and value.precompile and value.precompile.tainted)):
                return [(ok, value, err)]
        return map_workers(call, payloads)

    def offline_compile(self, path: Path, launches: list[CapturedLaunch]) -> StageOutcome:
        """Without a GPU: the launches the interpreter ran, compiled for sm_90 (aka.evaluate.static.offline_sm90); the
        compile tool's registers and spills. Seconds per kernel (gdn_prefill: ~10-16 s on 2 cores)."""
        ok, value, err = door.call("aka.evaluate.static.offline_sm90:compile_task",
                                   OfflinePayload(path=str(path), launches=launches), self.timeout, False)
        return StageOutcome(ok, err, {"compile_stats": value} if ok else {})

    def gate(self, path: Path, sets: list[str], rounds: int, seed: int) -> GateRecord:
        from aka.evaluate.parent.check import GRACE_S

        limit = self.timeout * max(1, rounds)
        payload = GatePayload(**self._where(), kernel=str(path), shapes=",".join(sets), rounds=rounds, seed=seed,
                              timeout_s=limit)
        ok, value, err = door.call("aka.evaluate.checker.gate:gate_worker", payload, limit + GRACE_S, self.interpreter)
        return gate_record(GateReport.model_validate(value)) if ok else GateRecord(error=err or "gate worker failed")

    def screen(self, path: Path, sets: list[str], rounds: int, seed: int,
               shapes: str, incumbent: Path | None = None) -> tuple[GateRecord, BenchOutcome | None]:
        if self._cuda_without_gpu(path):
            return GateRecord(error="a CUDA candidate cannot be gated without a GPU (nvcc compile only here)"), None
        impls = [self._kernel("candidate", path)]
        if incumbent is not None and not self.interpreter:  # paired timing; the interpreter decides nothing
            impls.insert(0, self._kernel("incumbent", incumbent))
        paired = len(impls) == 2
        # paired on a GPU: timed first, gated only when it could reach the ABBA re-measure (measure()'s
        # threshold), timing stopped once it runs clearly slower (aka.evaluate.checker.tasks.screen_worker)
        order = {"gate_above": self.gate_above, "rank": self.rank,
                 "stop": StopRule(name="candidate", against="incumbent", timing=self.rank, **SCREEN_STOP,
                                  shape_below=self.shape_below), "first": list(self.first)}
        payload = ScreenPayload(**self._where(), kernel=str(path), gate_shapes=",".join(sets), rounds=rounds,
                                seed=seed, impls=impls, shapes=shapes, config=self.screen_cfg, timeout_s=self.timeout,
                                gpu_lock=None if self.interpreter else str(self.gpu_lock),
                                verify=VerifySettings(impls=["candidate"], shapes=self._screen_checked(shapes, seed),
                                                      last=True), **(order if paired else {}))
        ok, value, err = door.call("aka.evaluate.checker.tasks:screen_worker", payload, self.timeout * 2 + 60,
                                   self.interpreter)
        if not ok:
            return GateRecord(error=err or "screen worker failed"), None
        got = ScreenResult.model_validate(value)
        bench = bench_outcome(got.bench, self.rank) if got.bench else None
        self._time_first(got.slow_shape)
        if got.gate_skipped:
            return GateRecord(skipped=got.gate_skipped, slow_shape=got.slow_shape or ""), bench
        if got.gate is None:
            return GateRecord(error="screen worker returned no gate report"), bench
        return gate_record(got.gate), bench

    def _time_first(self, shape: str | None) -> None:
        """Later screens time this shape first: racing the instance that refused the last candidates
        stops the next like them after one shape (fa4_decode's D9-q4 and D10-q4 were shapes 19 and 20)."""
        if shape:
            self.first = [shape, *(s for s in self.first if s != shape)][:4]

    def _screen_checked(self, shapes: str, seed: int) -> list[str] | None:
        """Shapes on which the screen checks the candidate's timed outputs: all in the interpreter, a few
        drawn per candidate on a GPU (each is a float64 reference; the ABBA re-measure checks them all)."""
        ids = [c.id for c in self.op.cases(shapes)]
        if self.interpreter or len(ids) <= self.screen_verify:
            return None
        return sorted(random.Random(seed).sample(ids, self.screen_verify))

    def bench(self, path: Path, shapes: str, beside: Path | None = None,
              names: tuple[str, str] = ("candidate", "incumbent")) -> BenchOutcome:
        """path's times (names[0]); with beside, that kernel's too (names[1], in incumbent_us), timed in
        the same worker on the same inputs, interleaved shape by shape."""
        impls = [self._kernel(names[0], path)] + ([self._kernel(names[1], beside)] if beside else [])
        payload = BenchPayload(**self._where(), impls=impls, shapes=shapes, config=self.screen_cfg)
        task = "aka.evaluate.checker.verify:bench_worker"
        # exclusive, as the ABBA: the set-up times while the first candidates' compile calls run their cases on
        # the GPU (aka.run.prefetch.head_start)
        with gpu_lock(None if self.interpreter else str(self.gpu_lock), exclusive=True):
            if self.on_shape is not None:
                ok, value, err = door.call_following(task, payload, self.timeout, self.interpreter, self.on_shape)
            else:
                ok, value, err = door.call(task, payload, self.timeout, self.interpreter)
        if not ok:
            return BenchOutcome({}, "none", err)
        return bench_outcome(BenchValue.model_validate(value), self.rank, *names)

    def competitors(self, shapes: str, timeout: float | None = None) -> tuple[dict[str, dict[str, float]], list[str]]:
        """The contract's external competitors (fla, sdpa): {name: {shape: µs}} and notes on skips; `timeout`
        caps the timing (default: the settings' competitors_timeout_s)."""
        from aka.evaluate.parent.impls import resolve

        refs, _ = resolve(self.op, list(self.op.spec.competitors))
        if not refs:
            return {}, ["the contract names no competitors"]
        payload = BenchPayload(**self._where(), impls=refs, shapes=shapes, config=self.screen_cfg)
        task = "aka.evaluate.checker.verify:bench_worker"
        if self.on_shape is not None:  # a line a shape: fla autotuned the ten gdn shapes for 169 s, silent (H200)
            ok, value, err = door.call_following(task, payload, timeout or self.competitors_timeout,
                                                 self.interpreter, self.on_shape)
        else:
            ok, value, err = door.call(task, payload, timeout or self.competitors_timeout, self.interpreter)
        if not ok:
            return {}, [f"competitor timing failed ({err}); the run goes on without them (--no-competitors skips it)"]
        got = BenchValue.model_validate(value)
        times, untimed = eager_medians(got, timing=self.rank if got.kind == "gpu" else "eager")
        notes: list[str] = []
        for name, _, res in untimed:
            if f"{name}:" not in " ".join(notes):  # one note per competitor (an import fails everywhere)
                notes.append(f"{name}: {res.skipped or res.error}"[:300])
        return times, notes

    def compare(self, incumbent: Path, candidate: Path, shapes: str) -> CompareOutcome:
        payload = ComparePayload(**self._where(), a=self._kernel("incumbent", incumbent),
                                 b=self._kernel("candidate", candidate), shapes=shapes, config=self.compare_cfg,
                                 rank=self.rank)
        with gpu_lock(str(self.gpu_lock), exclusive=True):
            ok, value, err = door.call("aka.evaluate.checker.verify:compare_worker", payload, 2 * self.timeout,
                                       self.interpreter)
        out = compare_outcome(Comparison.model_validate(value)) if ok else CompareOutcome({}, None, None, "none", err)
        slow = {s: r for s, r in out.speedups.items() if r < 1 - self.margin}
        self._time_first(min(slow, key=slow.__getitem__) if slow else None)
        return out


# A paired screen stops timing after 3 shapes once the candidate runs under 0.9x the incumbent there
# (geomean): no later shape lifts such a candidate to a promotion, and knowledge.json calls >= 10%
# slower a loser; the H200's screens spent 1-2.5 s a shape on the 10-30 shapes of every loser.
SCREEN_STOP = {"after": 3, "below": 0.9}
# A shape at under 1 - shape_margin - this in the screen stops it too: the ABBA re-measures found fa4_decode
# candidates at 0.72-0.84x on D9-q4/D10-q4 after screens that timed all 20 shapes (H200, 2026-12-04); the
# screen's short sampling reads a shape within a few percent, so 10 points of slack never refuse a promotion.
SCREEN_SLACK = 0.10


def timing_device(env: dict[str, str] | None = None) -> str:
    """The physical GPU this process times on: the first of CUDA_VISIBLE_DEVICES (a Ray worker pinned
    to one GPU sees only it), else device 0, where CUDA puts work when nothing is pinned."""
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return re.sub(r"[^0-9A-Za-z-]", "", visible) or "0"


def _bench_cfg(cap_s: float, graph: bool, **fewer: int) -> dict[str, Any]:
    """BenchConfig's defaults (aka.evaluate.host.bench) but for the time cap, the stop rule checked every 4 calls,
    and `fewer` (the screen's min_iters and max_iters)."""
    # graph replay only where the op ranks on it: the ABBA comparison times the same kind, so screen
    # and decision agree; eager calls then only give the host's cost, from a fixed handful of calls
    return BenchConfig(time_cap_s=cap_s, graph=graph, check_every=4, eager_iters=8 if graph else None,
                       **fewer).model_dump(exclude_none=True)
