"""Correctness gate: every shape case, several rounds of fresh inputs, checked against float64.

``check_kernel`` (parent side) runs the static policy, then ``gate_worker`` in a fresh worker
process (aka.runner). Per shape and round the worker: builds inputs from a new seed; computes the
float64 reference and the plain same-precision outputs first, each on its own clone of the
inputs; poisons the allocator with NaN blocks of the outputs' sizes (so a half-written output
cannot inherit correct bytes); calls the candidate on another clone; snapshots the outputs on the
current stream, synchronises the whole device, and checks every output (aka.gate_checks). Calls
on one shape follow each other with different inputs, so a cached result shows as an identical
output. A candidate that raises fails its shape; an OOM or device fault ends the worker (the
CUDA context is lost) and the runner records the stage.
"""

from __future__ import annotations

import hashlib
import importlib.util
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aka.gate_checks import OutputCheck, check_output, nan_equal

DEFAULT_ROUNDS = 3
MIN_CALLS = 2  # two calls per shape at least: the cached-result check needs a previous output


class RoundResult(BaseModel):
    round: int
    seed: int
    ok: bool
    reason: str = ""
    outputs: list[OutputCheck] = Field(default_factory=list)
    seconds: float = 0.0


class ShapeResult(BaseModel):
    id: str
    params: str = ""
    passed: bool
    stage: str | None = Field(None, description="check, run or compile when the shape failed")
    reason: str = ""
    rounds: list[RoundResult] = Field(default_factory=list)

    def worst(self, name: str) -> OutputCheck | None:
        """The round check of output `name` with the largest rel L2 (a failing one first)."""
        checks = [o for r in self.rounds for o in r.outputs if o.name == name]
        return max(checks, key=lambda o: (not o.ok, o.rel_l2 if o.rel_l2 is not None else float("inf")),
                   default=None)


class GateReport(BaseModel):
    op: str
    kernel: str
    kernel_sha256: str = ""
    passed: bool
    stage: str | None = Field(None, description="policy, import, compile, run, check, timeout, crash, oom, ...")
    reason: str = ""
    device: str = ""
    interpreter: bool = False
    shapes: str = ""
    n_rounds: int = 0
    results: list[ShapeResult] = Field(default_factory=list)
    violations: list[str] = Field(default_factory=list)
    stderr_tail: str = ""
    duration_s: float = 0.0
    summary: str = ""


class GatePayload(BaseModel):
    """What gate_worker reads. Extra keys (the loop's evaluator sends a few) are ignored."""

    model_config = ConfigDict(extra="ignore")
    op: str = Field(description="operator line, e.g. gdn_prefill")
    root: str = Field(description="project root holding workloads/ and kernels/")
    kernel: str = Field(description="path of the candidate module")
    shapes: str = Field("auto", description="'auto' (smoke+edge, plus full on a GPU) or sets/ids, comma-separated")
    rounds: int = Field(DEFAULT_ROUNDS, ge=1, description="rounds per shape (raised to 2 for the cache check)")
    seed: int = Field(0, description="base seed; every shape and round derives its own")
    fail_fast: bool = Field(False, description="stop at the first failing shape (the verdict is the same)")


# ---------------------------------------------------------------------------------------------
# parent side


def check_kernel(op, kernel: Path, *, shapes: str = "auto", rounds: int = DEFAULT_ROUNDS, seed: int = 0,
                 timeout: float = 600.0, interpreter: bool | None = None, fail_fast: bool = False) -> GateReport:
    """Policy check, then the gate in a fresh worker. Never raises for anything the candidate does."""
    from aka.policy import check_source
    from aka.runner import run_task

    source = Path(kernel).read_text()
    head = dict(op=op.name, kernel=str(kernel), kernel_sha256=hashlib.sha256(source.encode()).hexdigest(),
                shapes=shapes)
    policy = check_source(source, op.spec)
    if not policy.ok:
        return GateReport(**head, passed=False, stage="policy", reason=str(policy.violations[0]),
                          violations=[str(v) for v in policy.violations], summary=f"policy: {policy.violations[0]}")
    payload = GatePayload(op=op.name, root=str(op.root), kernel=str(Path(kernel).resolve()), shapes=shapes,
                          rounds=rounds, seed=seed, fail_fast=fail_fast)
    res = run_task("aka.gate:gate_worker", payload.model_dump(), timeout=timeout, interpreter=interpreter)
    if not res.ok:
        return GateReport(**head, passed=False, stage=res.stage, reason=res.error, stderr_tail=res.stderr_tail,
                          duration_s=res.duration_s, summary=f"{res.stage}: {res.error}")
    report = GateReport.model_validate(res.value)
    return report.model_copy(update=dict(kernel_sha256=head["kernel_sha256"], stderr_tail=res.stderr_tail,
                                         duration_s=res.duration_s))


# ---------------------------------------------------------------------------------------------
# worker side


def gate_worker(payload: dict[str, Any]) -> dict[str, Any]:
    """Entry run by aka.worker: returns a GateReport as a dict."""
    import torch

    from aka.interp import interpreter_requested
    from aka.ops import get_op

    cfg = GatePayload.model_validate(payload)
    op = get_op(cfg.op, Path(cfg.root))
    interp = interpreter_requested()
    device = "cuda" if torch.cuda.is_available() and not interp else "cpu"
    cases = resolve_cases(op, cfg.shapes, device)
    fn = load_candidate(Path(cfg.kernel), op.spec.entry)
    n_rounds = max(cfg.rounds, MIN_CALLS)
    results: list[ShapeResult] = []
    for i, case in enumerate(cases):
        results.append(check_case(op, fn, case, i, cfg.seed, n_rounds, device))
        if cfg.fail_fast and not results[-1].passed:
            break
    failed = [r for r in results if not r.passed]
    first = failed[0] if failed else None
    summary = f"{len(results) - len(failed)}/{len(cases)} shapes passed"
    report = GateReport(
        op=op.name, kernel=cfg.kernel, passed=not failed, stage=first.stage if first else None,
        reason=f"{first.id}: {first.reason}" if first else "", device=_device_name(device, interp),
        interpreter=interp, shapes=cfg.shapes, n_rounds=n_rounds, results=results,
        summary=summary + (f"; first failure {first.id}: {first.reason}" if first else ""),
    )
    return report.model_dump()


def resolve_cases(op, shapes: str, device: str) -> list:
    """'auto' -> smoke+edge (+full on a GPU); else comma-separated set names and shape ids."""
    if shapes == "auto":
        tokens = ["smoke", "edge"] + (["full"] if device == "cuda" else [])
    else:
        tokens = [t.strip() for t in shapes.split(",") if t.strip()]
    cases, seen = [], set()
    for tok in tokens:
        for case in op.cases(tok):  # a set name or shape ids
            if case.id not in seen:
                seen.add(case.id)
                cases.append(case)
    return cases


def load_candidate(path: Path, entry: str):
    """Import the candidate file under a private name; its entry function or TaskFailure('import')."""
    from aka.worker import TaskFailure, one_line

    spec = importlib.util.spec_from_file_location("aka_candidate", path)
    if spec is None or spec.loader is None:
        raise TaskFailure("import", f"{path}: cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise TaskFailure("import", f"importing the candidate raised {one_line(exc)}") from exc
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise TaskFailure("import", f"the candidate defines no function '{entry}'")
    return fn


def check_case(op, fn, case, index: int, seed: int, n_rounds: int, device: str) -> ShapeResult:
    """All rounds of one shape; stops at its first failing round."""
    from aka.worker import classify, one_line

    rounds: list[RoundResult] = []
    prev = None
    for r in range(n_rounds):
        s = seed + 1_000_003 * r + 101 * index
        t0 = time.perf_counter()
        try:
            rr, prev = run_round(op, fn, case, r, s, device, prev)
        except Exception as exc:
            stage = classify(exc)
            if stage in ("oom", "device-fault"):
                raise  # the context (or the allocator) is gone: the runner records it
            why = f"raised {one_line(exc)}" if stage == "run" else f"{stage} error: {one_line(exc)}"
            rounds.append(RoundResult(round=r, seed=s, ok=False, reason=why))
            return ShapeResult(id=case.id, params=case.describe(), passed=False, stage=stage,
                               reason=f"round {r}: {why}", rounds=rounds)
        rr.seconds = round(time.perf_counter() - t0, 3)
        rounds.append(rr)
        if not rr.ok:
            return ShapeResult(id=case.id, params=case.describe(), passed=False, stage="check",
                               reason=f"round {r}: {rr.reason}", rounds=rounds)
    return ShapeResult(id=case.id, params=case.describe(), passed=True, rounds=rounds)


def run_round(op, fn, case, r: int, seed: int, device: str, prev):
    """One call of the candidate on fresh inputs. Returns (RoundResult, outputs kept for the next round)."""
    import torch

    spec = op.spec
    inputs = op.inputs.make_inputs(case, seed, device)
    with torch.no_grad():
        ref = _as_tuple(op.reference.reference(**_clone(inputs)))
        plain = _as_tuple(op.reference.plain(**_clone(inputs)))
    dtypes = [getattr(torch, t.dtype) for t in spec.interface.outputs]
    cand_in = _clone(inputs)
    _poison([(tuple(x.shape), dt) for x, dt in zip(ref, dtypes)], device)
    _sync(device)
    raw = fn(**cand_in)
    snap = _snapshot(raw) if device == "cuda" else None  # queued on the current stream, before the sync
    _sync(device)
    names = spec.output_names()
    outs, problem = _normalise(raw, len(names))
    problem = problem or _stream_problem(raw, snap, names) or _input_problem(cand_in, inputs)
    if problem:
        return RoundResult(round=r, seed=seed, ok=False, reason=problem), None
    tensors = {k: v for k, v in cand_in.items() if isinstance(v, torch.Tensor)}
    checks = [
        check_output(name, out, ref[i], plain[i], spec.tolerances[name], dtypes[i], device, tensors,
                     prev[i] if prev else None)
        for i, (name, out) in enumerate(zip(names, outs))
    ]
    bad = [c for c in checks if not c.ok]
    kept = [o.detach().clone() for o in outs]
    return RoundResult(round=r, seed=seed, ok=not bad, reason=bad[0].reason if bad else "", outputs=checks), kept


# ---------------------------------------------------------------------------------------------
# helpers


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _clone(inputs: dict) -> dict:
    return {k: (v.clone() if hasattr(v, "clone") else v) for k, v in inputs.items()}


def _normalise(raw, n: int) -> tuple[list, str]:
    """Single-output ops may return one tensor; others a tuple/list of n outputs."""
    import torch

    outs = [raw] if isinstance(raw, torch.Tensor) and n == 1 else raw
    if not isinstance(outs, (tuple, list)):
        return [], f"returned {type(raw).__name__}, expected {n} output tensor(s)"
    if len(outs) != n:
        return [], f"returned {len(outs)} outputs, expected {n}"
    return list(outs), ""


def _poison(shapes: list[tuple[tuple, Any]], device: str) -> None:
    """Allocate NaN-filled blocks of the outputs' sizes and free them: the allocator hands them out next."""
    import torch

    blocks = [torch.full(s, float("nan"), dtype=dt, device=device) for s, dt in shapes if dt.is_floating_point]
    del blocks


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()  # every stream of the device, not only the current one


def _snapshot(raw):
    import torch

    return [t.clone() if isinstance(t, torch.Tensor) else None for t in _as_tuple(raw)]


def _stream_problem(raw, snap, names) -> str:
    """Outputs that changed between the current-stream snapshot and the device sync were written
    by work the caller's stream does not wait for (a side stream)."""
    if snap is None:
        return ""
    for name, now, then in zip(names, _as_tuple(raw), snap):
        if then is not None and now.shape == then.shape and not nan_equal(now, then):
            return f"{name}: changed after the device was synchronised (work left on another stream)"
    return ""


def _input_problem(cand_in: dict, pristine: dict) -> str:
    import torch

    for k, v in cand_in.items():
        if isinstance(v, torch.Tensor) and not nan_equal(v, pristine[k]):
            return f"modified its input '{k}'"
    return ""


def _device_name(device: str, interp: bool) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return "cpu (Triton interpreter)" if interp else "cpu"
