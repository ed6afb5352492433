"""The loop's one door to the measuring stages: static check, compile, gate, bench, compare.

The loop talks to an Evaluator and never imports a stage. RealEvaluator runs every stage that
executes candidate code in a fresh worker process (aka.evaluate.runner.run_task) and labels where timings
came from; tests hand run_loop() a fake evaluator object directly. There is no flag or setting
that swaps the evaluator from the CLI, so interpreter timings can never reach a promotion.
"""

from __future__ import annotations

import fcntl
import hashlib
import random
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aka.evaluate.bench import geomean
from aka.evaluate.compstats import CompileStats
from aka.evaluate.compstats import merge as merge_stats
from aka.settings import OptimizeSettings


def _map_workers(fn, items: list) -> list:
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


@dataclass
class StageOutcome:
    ok: bool
    error: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class GateOutcome:
    passed: dict[str, list[bool]]  # shape id -> pass per round
    error: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchOutcome:
    times_us: dict[str, float]  # shape id -> median microseconds
    timing: str  # "gpu" or "interpreter"
    error: str = ""
    roofline: dict[str, float] = field(default_factory=dict)  # shape id -> fraction of the roofline (GPU)
    # the incumbent timed interleaved with the candidate in the same worker (GPU screen): a paired
    # ratio, free of the drift between the setup's baseline timing and this one
    incumbent_us: dict[str, float] = field(default_factory=dict)


@dataclass
class CompareOutcome:
    speedups: dict[str, float]  # shape id -> incumbent time / candidate time
    geomean: float | None
    noise: float | None
    timing: str
    error: str = ""


class Evaluator(Protocol):
    def device(self) -> dict[str, Any]: ...
    def check(self, source: str) -> StageOutcome: ...
    def compile(self, path: Path) -> StageOutcome: ...
    def gate(self, path: Path, sets: list[str], rounds: int, seed: int) -> GateOutcome: ...
    def screen(self, path: Path, sets: list[str], rounds: int, seed: int,
               shapes: str, incumbent: Path | None = None) -> tuple[GateOutcome, BenchOutcome | None]: ...
    def bench(self, path: Path, shapes: str) -> BenchOutcome: ...
    def compare(self, incumbent: Path, candidate: Path, shapes: str) -> CompareOutcome: ...
    def competitors(self, shapes: str) -> tuple[dict[str, dict[str, float]], list[str]]: ...


def code_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def speedup(reference: dict[str, float], candidate: dict[str, float]) -> float | None:
    """Geomean over common shapes of reference time / candidate time."""
    common = [s for s in reference if s in candidate and candidate[s] > 0]
    return geomean([reference[s] / candidate[s] for s in common]) if common else None


# ---------------------------------------------------------------------------------------------
# the real stages, each in a worker process


def _run_task(task: str, payload: dict[str, Any], timeout: float, interpreter: bool) -> tuple[bool, Any, str]:
    """(ok, value, error) of task(payload) in a fresh worker process (aka.evaluate.runner)."""
    from aka.evaluate.runner import run_task

    res = run_task(task, payload, timeout=timeout, interpreter=interpreter)
    if res.ok:
        return True, res.value, ""
    return False, None, f"{res.stage}: {res.error}"[:500]


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
    cases = {c.id: c for s in ("smoke", "edge", "full") for c in op.cases(s)}
    if payload.get("cases"):  # this worker's share of the cases (the evaluator splits them)
        cases = {i: cases[i] for i in payload["cases"]}
    todo = sorted(cases.values(), key=op.flops) if gpu else [min(op.cases("smoke"), key=op.flops)]
    launches: list[dict[str, Any]] = []
    for case in todo:
        inputs = op.inputs.make_inputs(case, 0, "cuda" if gpu else "cpu")
        with _shared_lock(payload.get("gpu_lock") if gpu else None), _captured(not gpu, launches):
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


@contextmanager
def _shared_lock(path: str | None, exclusive: bool = False):
    """flock on `path`: shared for compile calls, exclusive for timing.

    Linux flock gives a waiting exclusive request no priority: with a dozen compile workers taking
    turns on the shared lock, a timing could wait for minutes. So everyone first passes a
    turnstile (`path`.turnstile): a reader only while it takes its shared lock, a writer for as
    long as it holds the lock, so readers that arrive after a writer queue behind it.
    """
    if not path:
        yield
        return
    with open(path + ".turnstile", "a") as gate, open(path, "a") as fh:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)


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
        self.screen_cfg = _bench_cfg(settings.screen_time_cap_s, 8, 60, 2) if gpu else None
        self.compare_cfg = _bench_cfg(settings.compare_time_cap_s, 20, 400, 3) if gpu else None
        # one lock per machine: compile calls (shared) stay out of ABBA comparisons (exclusive)
        self.gpu_lock = Path(tempfile.gettempdir()) / "aka-gpu.lock"
        self.split = max(1, settings.compile_split)
        self.screen_verify = settings.screen_verify_shapes

    def _cuda_without_gpu(self, path: Path) -> bool:
        from aka.evaluate.cudacheck import is_cuda_candidate

        return self.cuda and self.interpreter and is_cuda_candidate(path.read_text())

    def _payload(self, **extra: Any) -> dict[str, Any]:
        return {"op": self.op.name, "root": str(self.root), "force_cpu": self.interpreter, **extra}

    def _kernel(self, name: str, path: Path) -> dict[str, Any]:
        return {"name": name, "kind": "kernel", "path": str(path), "function": self.op.spec.entry}

    def device(self) -> dict[str, Any]:
        from aka.hardware import device_record

        return device_record(self.interpreter)

    def check(self, source: str) -> StageOutcome:
        from aka.evaluate.policy import check_source

        res = check_source(source, self.op.spec, allow_cuda_extension=self.cuda)
        return StageOutcome(res.ok, res.message)

    def compile(self, path: Path) -> StageOutcome:
        if self._cuda_without_gpu(path):  # cannot import it here; nvcc still finds compile errors
            from aka.evaluate.cudacheck import nvcc_compile

            ok, err = nvcc_compile(path.read_text(), self.timeout)
            return StageOutcome(ok, err, {"nvcc_only": True})
        # on a GPU the shapes are split over `compile_split` workers compiling side by side
        ids = sorted({c.id for s in ("smoke", "edge", "full") for c in self.op.cases(s)})
        parts = [[]] if self.interpreter else [p for p in (ids[i::self.split] for i in range(self.split)) if p]
        payloads = [self._payload(path=str(path), gpu_lock=str(self.gpu_lock), cases=p) for p in parts]
        results = _map_workers(lambda p: _run_task("aka.evaluate.evaluator:compile_worker", p, self.timeout,
                                                   self.interpreter), payloads)
        errors = [err for ok, _, err in results if not ok]
        seconds = max((v or {}).get("seconds", 0.0) for _, v, _ in results)
        detail = {"seconds": seconds, "workers": len(results)}
        stats = [CompileStats.model_validate(v["compile_stats"]) for ok, v, _ in results if ok and "compile_stats" in v]
        if stats:
            detail["compile_stats"] = merge_stats(stats).model_dump()
        launches = [x for ok, v, _ in results if ok for x in (v or {}).get("launches") or []]
        if launches:
            detail["launches"] = launches
        return StageOutcome(not errors, errors[0] if errors else "", detail)

    def offline_compile(self, path: Path, launches: list[dict[str, Any]]) -> StageOutcome:
        """Without a GPU: the launches the interpreter ran, compiled for sm_90 (aka.evaluate.offline_sm90); the
        compile tool's registers and spills. Seconds per kernel (gdn_prefill: ~10-16 s on 2 cores)."""
        ok, value, err = _run_task("aka.evaluate.offline_sm90:compile_task", {"path": str(path), "launches": launches},
                                   self.timeout, False)
        return StageOutcome(ok, err, {"compile_stats": value} if ok else {})

    def gate(self, path: Path, sets: list[str], rounds: int, seed: int) -> GateOutcome:
        from aka.evaluate.gate import GRACE_S

        limit = self.timeout * max(1, rounds)
        payload = self._payload(kernel=str(path), shapes=",".join(sets), rounds=rounds, seed=seed, timeout_s=limit)
        ok, value, err = _run_task("aka.evaluate.gate:gate_worker", payload, limit + GRACE_S, self.interpreter)
        return gate_outcome(value) if ok else GateOutcome({}, err or "gate worker failed")

    def screen(self, path: Path, sets: list[str], rounds: int, seed: int,
               shapes: str, incumbent: Path | None = None) -> tuple[GateOutcome, BenchOutcome | None]:
        if self._cuda_without_gpu(path):
            return GateOutcome({}, "a CUDA candidate cannot be gated without a GPU (nvcc compile only here)"), None
        impls = [self._kernel("candidate", path)]
        if incumbent is not None and not self.interpreter:  # paired timing; the interpreter decides nothing
            impls.insert(0, self._kernel("incumbent", incumbent))
        payload = self._payload(kernel=str(path), gate_shapes=",".join(sets), rounds=rounds, seed=seed,
                                impls=impls, shapes=shapes, config=self.screen_cfg, timeout_s=self.timeout,
                                gpu_lock=None if self.interpreter else str(self.gpu_lock),
                                verify={"impls": ["candidate"], "shapes": self._screen_checked(shapes, seed),
                                        "last": True})
        ok, value, err = _run_task("aka.evaluate.evaluator:screen_worker", payload, self.timeout * 2 + 60,
                                   self.interpreter)
        if not ok:
            return GateOutcome({}, err or "screen worker failed"), None
        g = gate_outcome(value["gate"])
        return g, (bench_outcome(value["bench"]) if value.get("bench") else None)

    def _screen_checked(self, shapes: str, seed: int) -> list[str] | None:
        """Shapes on which the screen checks the candidate's timed outputs: all in the interpreter, a few
        drawn per candidate on a GPU (each is a float64 reference; the ABBA re-measure checks them all)."""
        ids = [c.id for c in self.op.cases(shapes)]
        if self.interpreter or len(ids) <= self.screen_verify:
            return None
        return sorted(random.Random(seed).sample(ids, self.screen_verify))

    def bench(self, path: Path, shapes: str) -> BenchOutcome:
        payload = self._payload(impls=[self._kernel("candidate", path)], shapes=shapes, config=self.screen_cfg)
        ok, value, err = _run_task("aka.evaluate.bench_worker:bench_worker", payload, self.timeout, self.interpreter)
        return bench_outcome(value) if ok else BenchOutcome({}, "none", err)

    def competitors(self, shapes: str) -> tuple[dict[str, dict[str, float]], list[str]]:
        """The contract's external competitors (fla, sdpa): {name: {shape: µs}} and notes on skips."""
        from aka.evaluate.impls import resolve

        refs, _ = resolve(self.op, list(self.op.spec.competitors))
        if not refs:
            return {}, ["the contract names no competitors"]
        payload = self._payload(impls=[r.model_dump() for r in refs], shapes=shapes, config=self.screen_cfg)
        ok, value, err = _run_task("aka.evaluate.bench_worker:bench_worker", payload, self.competitors_timeout,
                                   self.interpreter)
        if not ok:
            return {}, [f"competitor timing failed ({err}); the run goes on without them (--no-competitors skips it)"]
        times: dict[str, dict[str, float]] = {}
        notes: list[str] = []
        for row in value["rows"]:
            for name, res in row["results"].items():
                if "eager" in res:
                    times.setdefault(name, {})[row["shape"]] = res["eager"]["median_us"]
                elif f"{name}:" not in " ".join(notes):  # one note per competitor (an import fails everywhere)
                    notes.append(f"{name}: {res.get('skipped') or res.get('error')}"[:300])
        return times, notes

    def compare(self, incumbent: Path, candidate: Path, shapes: str) -> CompareOutcome:
        payload = self._payload(a=self._kernel("incumbent", incumbent), b=self._kernel("candidate", candidate),
                                shapes=shapes, config=self.compare_cfg)
        with _shared_lock(str(self.gpu_lock), exclusive=True):
            ok, value, err = _run_task("aka.evaluate.bench_worker:compare_worker", payload, 2 * self.timeout,
                                       self.interpreter)
        return compare_outcome(value) if ok else CompareOutcome({}, None, None, "none", err)


def _bench_cfg(cap_s: float, min_iters: int, max_iters: int, copies: int) -> dict[str, Any]:
    # eager only: the ABBA comparison times eager calls too, so screen and decision agree
    return {"warmup": 2, "min_iters": min_iters, "max_iters": max_iters, "time_cap_s": cap_s,
            "input_copies": copies, "graph": False, "check_every": 4}


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
        with _shared_lock(payload.get("gpu_lock"), exclusive=True):
            sent, value = bench_timed(host, payload)
        return {"gate": report.model_dump(), "bench": bench_judged(host, sent, value)}


def bench_outcome(value: dict[str, Any]) -> BenchOutcome:
    times, errors, roofline, inc = {}, [], {}, {}
    for row in value["rows"]:
        ref = row["results"].get("incumbent") or {}
        if "eager" in ref:
            inc[row["shape"]] = ref["eager"]["median_us"]
        res = row["results"]["candidate"]
        if "eager" in res:
            times[row["shape"]] = res["eager"]["median_us"]
            if res.get("roofline_frac") is not None:
                roofline[row["shape"]] = res["roofline_frac"]
        else:
            errors.append(f"{row['shape']}: {res.get('error') or res.get('skipped')}")
    return BenchOutcome(times, "gpu" if value["kind"] == "gpu" else "interpreter", "; ".join(errors), roofline, inc)


def compare_outcome(cmp: dict[str, Any]) -> CompareOutcome:
    """aka.evaluate.compare ratios are time_cand / time_inc; the Supervisor reads speedups (inverse)."""
    speedups = {s["shape"]: 1.0 / s["ratio"] for s in cmp["shapes"]}
    gm = 1.0 / cmp["geomean"]
    noise = (cmp["ci_high"] - cmp["ci_low"]) / 2 / cmp["geomean"]
    timing = "gpu" if str(cmp.get("kind", "")).startswith("gpu") else "interpreter"
    return CompareOutcome(speedups, gm, noise, timing)


def gate_outcome(report: dict[str, Any]) -> GateOutcome:
    """Per shape, per round pass/fail from aka.evaluate.gate's GateReport (as a dict)."""
    passed: dict[str, list[bool]] = {}
    for shape in report.get("results", []):
        rounds = [bool(r["ok"]) for r in shape.get("rounds", [])]
        passed[shape["id"]] = rounds if rounds and shape["passed"] == all(rounds) else [bool(shape["passed"])]
    error = "" if report.get("passed") else (report.get("reason") or report.get("summary") or "gate failed")
    if report.get("passed") and not passed:
        error = "gate passed no shapes"
    # the worker's own report has no duration (the parent times the process): sum the rounds
    seconds = report.get("duration_s") or sum(r.get("seconds", 0.0) for s in report.get("results", [])
                                               for r in s.get("rounds", []))
    detail = {"summary": report.get("summary", ""), "device": report.get("device", ""),
              "rounds": report.get("n_rounds", 0), "seconds": round(seconds, 3), "errors": gate_errors(report)}
    return GateOutcome(passed, error[:500], detail)


def gate_errors(report: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per shape and output, the worst round's rel L2 against float64 beside the plain same-precision
    implementation's: the figures an engineer reads before trusting a promoted kernel."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for shape in report.get("results", []):
        worst: dict[str, dict[str, Any]] = {}
        for r in shape.get("rounds", []):
            for o in r.get("outputs", []):
                key = (not o.get("ok", False), o.get("rel_l2") if o.get("rel_l2") is not None else float("inf"))
                w = worst.get(o["name"])
                if w is None or key > w["key"]:
                    worst[o["name"]] = {"key": key, "rel_l2": o.get("rel_l2"), "plain_rel_l2": o.get("plain_rel_l2")}
        if worst:
            out[shape["id"]] = {n: {"rel_l2": w["rel_l2"], "plain_rel_l2": w["plain_rel_l2"]} for n, w in worst.items()}
    return out
