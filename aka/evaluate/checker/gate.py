"""Correctness gate: every shape case, several rounds of fresh inputs, checked against float64.

The checker's half: ``gate_worker`` runs in a fresh worker process (aka.evaluate.parent.check's
``check_kernel`` starts it from the parent, through aka.evaluate.parent.runner). The checker never runs
candidate code: it starts the candidate's own process (aka.evaluate.checker.sandbox.Host, aka.evaluate.host.main)
and, per shape and round, builds inputs from a new seed (scalars such as the softmax scale drawn from
their contract range from round 1 on, the input regime cycling through the contract's variants),
computes the float64 reference and the plain same-precision outputs, hands the inputs over as bytes,
and checks the bytes that come back (aka.evaluate.checker.gate_checks). The candidate's side poisons its
allocator with NaN, records what the call launched (aka.evaluate.host.launches) and reports what only it can
see (subclasses, aliasing, side streams, modified inputs). Calls on one shape follow each other with
different inputs in the same buffers, so a cached result shows as an identical output or a shared one.
The last call repeats the previous call's scalars and input regime (fresh values): a kernel's host
caches keyed on shape and scalars (plans, compiled launches, descriptors) then take their warm path
under the gate too, not only the cold one. Whatever the candidate patches in its own process, the
references and verdicts here are out of its reach. A candidate that raises fails its shape; a hang, a
crash, an OOM or a device fault ends the candidate's process and the gate records the stage.
"""

from __future__ import annotations

import math
import random
import re
import time
from pathlib import Path
from typing import Any

from aka.contract.shapes import gated_sets
from aka.evaluate.checker.gate_checks import check_output
from aka.evaluate.wire import (
    DEFAULT_ROUNDS,
    CallRequest,
    CoverageAnswer,
    CoveragePayload,
    ExpectedOutput,
    GatePayload,
    GateReport,
    HostAnswer,
    LoadRequest,
    RoundResult,
    ShapeResult,
    TaskRequest,
)

MIN_CALLS = 2  # two calls per shape at least: the cached-result check needs a previous output
WARM_CALLS = 1  # then one call that repeats the last one's scalars and regime (a warm call), fresh values
# On a GPU, a source that orders its programs itself (atomics, volatile loads, fences at GPU scope: a ticket
# that picks the program merging the others' partials) gets each round's call repeated on the same inputs,
# each checked: a missing acquire or release shows on some calls, and never in the interpreter, which runs
# programs one at a time. Barriers inside one program (debug_barrier, mbarriers) do not count.
ORDER_REPEATS = 8
_SIGNALLING = re.compile(r"\batomic_\w+\s*\(|volatile\s*=\s*True|\bsem\s*=|__threadfence|"
                         r"\batomic(Add|CAS|Exch|Inc)\b|\bfence\.(acq_rel|sc|proxy)\.gpu")


def gate_worker(payload: GatePayload) -> GateReport:
    """Entry run by aka.evaluate.checker.worker (which parses the payload and writes the report)."""
    from aka.evaluate.checker.sandbox import new_host

    with new_host() as host:  # aka.evaluate.checker.worker started it first: its imports overlap the checker's
        report = gate_on(host, payload)
        report.stderr_tail = host.log_tail()
    return report


def device_of() -> tuple[str, bool]:
    """('cuda' or 'cpu', interpreter?) for this process, as aka.evaluate.checker.worker selected it."""
    import torch

    from aka.evaluate.host.interp import interpreter_requested

    interp = interpreter_requested()
    return ("cuda" if torch.cuda.is_available() and not interp else "cpu"), interp


def gate_on(host, cfg: GatePayload) -> GateReport:
    """The gate against an already started candidate process (the screen reuses it for timing)."""
    from aka.contract.ops import get_op
    from aka.evaluate.checker.sandbox import HostError

    deadline = time.monotonic() + cfg.timeout_s
    op = get_op(cfg.op, Path(cfg.root))
    device, interp = device_of()
    cases = resolve_cases(op, cfg.shapes, device)
    n_rounds = max(cfg.rounds, MIN_CALLS) + WARM_CALLS
    repeats = order_repeats(Path(cfg.kernel).read_text(errors="replace"), device)
    base = dict(op=op.name, kernel=cfg.kernel, device=_device_name(device, interp), interpreter=interp,
                shapes=cfg.shapes, n_rounds=n_rounds)
    results: list[ShapeResult] = []
    try:
        _load(host, cfg.kernel, op.spec.entry, deadline)
        for i, case in enumerate(cases):
            results.append(check_case(host, op, case, i, cfg.seed, n_rounds, device, deadline, repeats))
            if cfg.fail_fast and not results[-1].passed:
                break
    except HostError as exc:  # the candidate's process is gone (or never loaded): the whole gate fails
        why = str(exc)
        if exc.stage == "timeout":
            why = f"no result within {cfg.timeout_s:g} s (the gate's time limit): killed"
        where = f"{cases[len(results)].id}: " if exc.stage != "import" and len(results) < len(cases) else ""
        return GateReport(**base, passed=False, stage=exc.stage, reason=where + why, results=results,
                          summary=f"{exc.stage}: {where}{why}")
    failed = [r for r in results if not r.passed]
    first = failed[0] if failed else None
    summary = f"{len(results) - len(failed)}/{len(cases)} shapes passed"
    if cfg.coverage and not failed:
        base["coverage"] = _coverage(host, op, cfg, [c.id for c in cases], deadline)
    return GateReport(
        **base, passed=not failed, stage=first.stage if first else None,
        reason=f"{first.id}: {first.reason}" if first else "", results=results,
        summary=summary + (f"; first failure {first.id}: {first.reason}" if first else ""),
    )


def _coverage(host, op, cfg: GatePayload, ids: list[str], deadline: float) -> list[str]:
    """aka.evaluate.host.coverage's lines for the loaded candidate, from its own process; a failure is a line
    too (coverage is information, not a verdict)."""
    from aka.evaluate.host.coverage import coverage_lines

    payload = CoveragePayload(op=op.name, root=str(op.root), kernel=cfg.kernel, ids=ids)
    try:
        ans = host.request(TaskRequest(task="aka.evaluate.host.coverage:host_coverage", payload=payload.model_dump()),
                           timeout=min(_left(deadline), 120.0))
        if not ans.ok:
            return [f"coverage: not computed ({ans.error[:160]})"]
        value = CoverageAnswer.model_validate(ans.value)
    except Exception as exc:  # the gate's verdict stands; say why coverage is missing
        return [f"coverage: not computed ({type(exc).__name__}: {str(exc)[:120]})"]
    return coverage_lines(value.missing, value.n_full)


def _load(host, kernel: str, entry: str, deadline: float) -> None:
    from aka.evaluate.checker.sandbox import HostError

    ans = host.request(LoadRequest(kernel=kernel, entry=entry), timeout=_left(deadline))
    if not ans.ok:
        raise HostError(ans.stage or "import", ans.error)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


def resolve_cases(op, shapes: str, device: str) -> list:
    """'auto' -> smoke+edge (+full on a GPU); else comma-separated set names and shape ids."""
    if shapes == "auto":
        tokens = [s.value for s in gated_sets(gpu=device == "cuda")]
    else:
        tokens = [t.strip() for t in shapes.split(",") if t.strip()]
    cases, seen = [], set()
    for tok in tokens:
        for case in op.cases(tok):  # a set name or shape ids
            if case.id not in seen:
                seen.add(case.id)
                cases.append(case)
    return cases


def check_case(host, op, case, index: int, seed: int, n_rounds: int, device: str, deadline: float,
               repeats: int = 0) -> ShapeResult:
    """All rounds of one shape; stops at its first failing round."""
    rounds: list[RoundResult] = []
    prev = None
    for r in range(n_rounds):
        s = round_seed(seed, r, index)
        like = warm_of(r, n_rounds, seed, index)
        t0 = time.perf_counter()
        rr, prev, stage = run_round(host, op, case, r, s, device, prev, deadline, like, index, repeats)
        rr.seconds = round(time.perf_counter() - t0, 3)
        rounds.append(rr)
        if not rr.ok:
            return ShapeResult(id=case.id, params=case.describe(), passed=False, stage=stage,
                               reason=f"round {r}{round_label(op, rr)}: {rr.reason}", rounds=rounds)
    return ShapeResult(id=case.id, params=case.describe(), passed=True, rounds=rounds)


def order_repeats(source: str, device: str) -> int:
    """Calls per round that repeat the round's inputs: ORDER_REPEATS on a GPU when the source orders its
    programs itself (atomics, fences, volatile loads: a ticket that picks the program merging the
    others' partials), else 0. The interpreter runs programs one at a time, so a missing acquire or
    release never shows there; on a GPU it shows on some calls, not all. Pure."""
    return ORDER_REPEATS if device == "cuda" and _SIGNALLING.search(source) else 0


def round_seed(seed: int, r: int, index: int) -> int:
    """The seed of round r of the index-th shape. Pure."""
    return seed + 1_000_003 * r + 101 * index


def warm_of(r: int, n_rounds: int, seed: int, index: int) -> tuple[int, int] | None:
    """(round, seed) whose scalars and regime round r repeats: the last WARM_CALLS rounds repeat the
    round before them; None for the others. Pure."""
    if r < n_rounds - WARM_CALLS or r == 0:
        return None
    src = n_rounds - WARM_CALLS - 1
    return src, round_seed(seed, src, index)


def round_label(op, rr: RoundResult) -> str:
    """' (mixed; scale=0.0942)' when the round's inputs were not the defaults: a failure names what
    the round varied (the regime, a drawn scalar). Pure."""
    parts = []
    variants = op.spec.input_variants
    if rr.variant and variants and rr.variant != variants[0]:
        parts.append(rr.variant)
    parts += [f"{k}={v:.4g}" for k, v in rr.scalars.items()]
    if rr.warm:
        parts.append("warm: repeats the previous call's scalars")
    return f" ({'; '.join(parts)})" if parts else ""


def draw_scalars(spec, r: int, seed: int) -> dict[str, float]:
    """Round 0 passes no scalar (the default path); later rounds draw each drawable scalar log-uniformly
    in its contract range, from the round's seed. Pure."""
    if r == 0:
        return {}
    rng = random.Random(seed * 7919 + 17)
    return {s.name: round(math.exp(rng.uniform(math.log(s.draw[0]), math.log(s.draw[1]))), 6)
            for s in spec.interface.scalars if s.draw}


def variant_of(variants: list[str], r: int, index: int) -> str:
    """The input regime of round r of the index-th shape: each shape goes on through the contract's list
    where the previous one's default rounds stopped, so a few small shapes draw every regime. Pure."""
    return variants[(r + DEFAULT_ROUNDS * index) % len(variants)] if variants else ""


def round_inputs(op, case, r: int, seed: int, device: str,
                 like: tuple[int, int] | None = None, index: int = 0) -> tuple[dict[str, Any], dict[str, float], str]:
    """(inputs, drawn scalars, input variant) of round r of the index-th shape; `like` (round, seed): take
    that round's scalars and variant, keep this round's seed for the values."""
    sr, ss = like or (r, seed)
    variant = variant_of(op.spec.input_variants, sr, index)
    kw = {"variant": variant} if variant else {}
    return op.inputs.make_inputs(case, seed, device, **kw), draw_scalars(op.spec, sr, ss), variant


def run_round(host, op, case, r: int, seed: int, device: str, prev, deadline: float,
              like: tuple[int, int] | None = None, index: int = 0, repeats: int = 0):
    """One call of the candidate on fresh inputs: (RoundResult, outputs kept for the next round, stage);
    ``repeats`` more calls on the same inputs, each checked against the same reference."""
    import torch

    from aka.evaluate.checker.sandbox import write_inputs

    spec = op.spec
    inputs, scalars, variant = round_inputs(op, case, r, seed, device, like, index)
    with torch.no_grad():
        ref = _as_tuple(op.reference.reference(**_clone(inputs), **scalars))
        plain = _as_tuple(op.reference.plain(**_clone(inputs), **scalars))
    names = spec.output_names()
    expected = [ExpectedOutput(name=n, shape=list(x.shape), dtype=t.dtype)
                for n, x, t in zip(names, ref, spec.interface.outputs)]
    refs, extra = write_inputs(host.folder, inputs)
    req = CallRequest(device=device, inputs=refs, scalars={**extra, **scalars}, expected=expected,
                      knobs=case.knobs, profile=r == 0 and device == "cuda")
    head = RoundResult(round=r, seed=seed, variant=variant, scalars=scalars, warm=like is not None, ok=False)
    rr, outs, stage = _call_checked(host, req, head, spec, ref, plain, prev, deadline)
    for k in range(repeats if rr.ok else 0):  # the same inputs again: a race between programs shows on some calls
        again, _, stage = _call_checked(host, req.model_copy(update={"profile": False, "reuse_inputs": True}), head,
                                        spec, ref, plain, None, deadline)
        if not again.ok:
            again.reason = (f"repeat {k + 1} of {repeats} on the same inputs: {again.reason} (the source orders "
                            "its programs with atomics or fences: a race that shows on some calls)")
            return again, None, stage
    return rr, outs, stage


def _call_checked(host, req: CallRequest, head: RoundResult, spec, ref, plain, prev, deadline: float):
    """One call of the candidate and the checks of its outputs: (RoundResult, outputs, stage); `head` holds
    the round's own fields (round, seed, variant, scalars, warm), the rest is this call's."""
    import torch

    from aka.evaluate import exchange
    from aka.evaluate.checker.sandbox import HostError

    names = spec.output_names()
    dtypes = [getattr(torch, t.dtype) for t in spec.interface.outputs]
    ans: HostAnswer = host.request(req, timeout=_left(deadline))
    if not ans.ok:
        stage = ans.stage or "run"
        if stage in ("oom", "device-fault"):
            raise HostError(stage, ans.error)
        why = f"raised {ans.error}" if stage == "run" else f"{stage} error: {ans.error}"
        return head.model_copy(update={"ok": False, "reason": why}), None, stage
    launches = ans.launches
    if ans.problem:
        return head.model_copy(update={"ok": False, "reason": ans.problem, "launches": launches}), None, "check"
    try:
        outs = [_read_output(host.folder, ans.outputs[i], req.expected[i], req.device) for i in range(len(names))]
    except (exchange.ExchangeError, IndexError, KeyError, TypeError, ValueError) as exc:
        return head.model_copy(update={"ok": False, "reason": f"outputs came back malformed: {exc}"}), None, "check"
    checks = [
        check_output(name, out, ref[i], plain[i], spec.tolerances[name], dtypes[i], req.device, {},
                     prev[i] if prev else None)
        for i, (name, out) in enumerate(zip(names, outs))
    ]
    bad = [c for c in checks if not c.ok]
    return (head.model_copy(update={"ok": not bad, "reason": bad[0].reason if bad else "", "outputs": checks,
                                    "launches": launches}),
            outs, "check")


def _read_output(folder: Path, ref, exp: ExpectedOutput, device: str):
    from aka.evaluate import exchange

    if list(ref.shape) != list(exp.shape) or ref.dtype != exp.dtype:
        raise exchange.ExchangeError(f"{exp.name}: described as {ref.dtype}{list(ref.shape)}, "
                                     f"expected {exp.dtype}{exp.shape}")
    return exchange.get(ref, folder, device)


# ---------------------------------------------------------------------------------------------
# helpers


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _clone(inputs: dict) -> dict:
    return {k: (v.clone() if hasattr(v, "clone") else v) for k, v in inputs.items()}


def _device_name(device: str, interp: bool) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return "cpu (Triton interpreter)" if interp else "cpu"
