"""Candidates prepared ahead: planned and written one after another, statically checked and
compiled in parallel (CPU work) while the loop gates and times the current one on the GPU."""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aka.agent.llm.base import AttemptFailed, Backend, Context
from aka.agent.llm.edits import compact_diff
from aka.evaluate.parent.evaluator import Evaluator
from aka.evaluate.parent.outcomes import code_hash
from aka.knowledge.incumbent_facts import incumbent_evidence, profile_incumbent
from aka.records import Attempt, CheckRecord, CompileRecord, Measurements, RunRecord, Usage
from aka.run.state import State, first_state, shape_plan
from aka.run.store import RunStore, cache_dir
from aka.run.toolbench import ToolBench
from aka.settings import OptimizeSettings


class View(Protocol):
    def update(self, **fields: Any) -> None: ...


class Quiet:
    """A View that shows nothing (no display attached, or a Ray worker's own measurement)."""

    def update(self, **fields: Any) -> None:
        pass


@dataclass
class Prepared:
    """A candidate up to compilation: its record so far and what the static stages found."""

    rec: Attempt
    path: Path
    m: Measurements
    summary: str
    source: str = ""


class Job:
    """One candidate in preparation on a daemon thread (Ctrl-C never waits for it).

    Generation is chained (job k plans after job k-1 has, and sees it as pending) so a backend
    never proposes the same thing twice; check and compile then run in parallel across jobs.
    """

    def __init__(self, n: int, prev: Job | None, make, st: State):
        self.n, self.prev, self.st = n, prev, st
        self.prep: Prepared | None = None
        self.error: BaseException | None = None
        self.generated = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(make,), daemon=True)
        self._thread.start()

    def pending(self) -> list[Prepared]:
        return [*(self.prev.pending() if self.prev else []), *([self.prep] if self.prep else [])]

    def _run(self, make) -> None:
        try:
            if self.prev is not None:
                self.prev.generated.wait()
                if self.prev.error is not None:
                    raise self.prev.error
            self.prep = make(self.n, st=self.st, pending=self.prev.pending() if self.prev else [])
        except BaseException as exc:  # re-raised in the loop's thread by result()
            self.error = exc
        finally:
            self.generated.set()
        if self.prep is not None and not self.prep.rec.failed_stage:
            _verify_into(self.prep, make.keywords["ev"])

    def result(self) -> Prepared:
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.prep


def head_start(store: RunStore, settings: OptimizeSettings, op, backend: Backend, ev: Evaluator, view: View,
               profiler=None) -> deque[Job]:
    """The first candidates (one per worker plus `prepare_ahead`) planned, written, checked and compiled
    while the set-up gates and times the incumbent (called once the incumbent has compiled): on the
    H200 gdn_prefill's first candidate waited 67 s for its compile after a 92 s set-up (2026-12-04).
    They are planned from what the set-up knows by then: the incumbent, its compile statistics, a
    cached profile, the lessons; not its times (an offline plan does not read them)."""
    profile_incumbent(store, op, settings, profiler, cache_dir(store.path.parent.parent, op.name))
    run = store.read_run()
    make = functools.partial(generate, store=store, settings=settings, op=op, backend=backend, ev=ev, run=run,
                             view=view)
    st, jobs = first_state(run), deque()
    for n in range(min(settings.gpus + settings.prepare_ahead, settings.budget.max_candidates)):
        jobs.append(Job(n, jobs[-1] if jobs else None, make, st))
    return jobs


def generate(n: int, *, store: RunStore, settings: OptimizeSettings, op, backend: Backend, ev: Evaluator,
             st: State, run: RunRecord, pending: list[Prepared], view: View) -> Prepared:
    """Plan and write candidate n; the static check and compile follow in _verify_into."""
    t0 = time.monotonic()
    incumbent = st.incumbent.read_text()
    history = store.attempts()
    spent = st.used.tokens + sum(p.rec.tokens for p in pending)
    cands = store.path / "candidates"
    ctx = Context(op=op.name, attempt=n, incumbent_source=incumbent, incumbent_label=st.incumbent_label,
                  baseline_path=str(op.path("baseline")), kernel_dir=str(op.path("baseline").parent),
                  hardware=run.device.model_dump(mode="json"), history=history, seed=settings.seed,
                  pending=[p.rec for p in pending], run_dir=str(store.path), root=str(op.root),
                  evidence=incumbent_evidence(run, history),
                  incumbent_score=st.incumbent_score,
                  verify=lambda src: _verify(src, cands / f"{n}.draft.py", ev),
                  notify=view.update, lessons=list(run.lessons),
                  workbench=ToolBench(ev, op, settings, cands / f"{n}.tool.py", st.incumbent,
                                      settings.seed + 1000 * n + 500),
                  tokens_left=None if settings.budget.max_tokens is None else settings.budget.max_tokens - spent)
    rec = Attempt(n=n, started=time.strftime("%Y-%m-%dT%H:%M:%S"), evidence_offered=[e["id"] for e in ctx.evidence])
    _, bench_shapes, _ = shape_plan(settings)
    m = Measurements(expected_shapes=[c.id for c in op.cases(bench_shapes)])
    try:
        plan, use1 = backend.plan(ctx)
        rec.plan, rec.config = plan, plan.fixed_config()
        source, use2 = backend.candidate(plan, ctx)
    except AttemptFailed as exc:  # an unusable answer: recorded, its tokens counted, the run goes on
        used = exc.usage + (use1 if rec.plan is not None else Usage())
        _update(rec, failed_stage=exc.stage, usage=used, tokens=used.total, code_hash="", **ctx.trace)
        m.backend_error = f"{exc.stage}: {exc}"
        return Prepared(rec, cands / f"{n}.py", m, f"({exc.stage} failed)")
    usage = use1 + use2
    # the edit is what later prompts show of this attempt (history, and in flight while it is measured)
    _update(rec, usage=usage, tokens=usage.total, code_hash=code_hash(source), edit=compact_diff(incumbent, source),
            **ctx.trace)
    path = store.write_candidate(n, source)
    seen = dict(st.seen, **{p.rec.code_hash: p.rec.n for p in pending})
    if rec.code_hash in seen:
        rec.failed_stage = "duplicate"
        m.backend_error = f"identical code already measured (attempt {seen[rec.code_hash]}); not re-measured"
    rec.prepare_s = round(time.monotonic() - t0, 3)
    rec.stage_s["generate"] = rec.prepare_s
    return Prepared(rec, path, m, plan.summary(), source)


def _update(rec: Attempt, **fields: Any) -> None:
    """Set fields on the record, validated (the backend's trace keys included: llm_calls, tool_calls)."""
    for k, v in fields.items():
        setattr(rec, k, v)


def _verify_into(prep: Prepared, ev: Evaluator) -> None:
    t0 = time.monotonic()
    stage, error = _verify(prep.source, prep.path, ev, prep.rec)
    if stage:
        prep.rec.failed_stage = stage
        setattr(prep.m, f"{stage}_error", error or "failed")
    prep.rec.stage_s["compile"] = round(time.monotonic() - t0, 3)
    prep.rec.prepare_s = round(prep.rec.prepare_s + time.monotonic() - t0, 3)


def _verify(source: str, path: Path, ev: Evaluator, rec: Attempt | None = None) -> tuple[str, str]:
    """Static check then compile: ('', '') when both pass, else (stage, error)."""
    if rec is None:  # a draft from a backend's repair loop
        path.write_text(source)
    chk = ev.check(source)
    if rec is not None:
        rec.check = CheckRecord(ok=chk.ok, error=chk.error)
    if not chk.ok:
        return "check", chk.error
    comp = ev.compile(path)
    if rec is not None:
        kept = {k: v for k, v in comp.detail.items() if k != "launches"}  # the tools' input, not a record
        rec.compile = CompileRecord(**{"ok": comp.ok, "error": comp.error, **kept})
    return ("", "") if comp.ok else ("compile", comp.error)
