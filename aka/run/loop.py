"""The optimisation loop: plan -> candidate -> check -> compile -> gate -> bench -> decide -> record.

Read run_loop() top to bottom: one round per candidate until the budget says stop. Every stage
is reached through the Evaluator (aka.evaluate.evaluator), the backend (aka.agent.llm) or the Supervisor's pure
decide(); this module only sequences them and records what happened. State that matters for the
next round (budget used, best score, incumbent) is rebuilt from attempts.jsonl, so a resumed run
continues exactly where the log ends: finished attempts are never repeated, the one in flight
when the process died is redone.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aka.agent.llm.base import AttemptFailed, Backend, BackendExhausted, Context, ProviderError, Usage
from aka.agent.llm.edits import compact_diff
from aka.errors import AkaError
from aka.evaluate.evaluator import Evaluator, code_hash, speedup
from aka.knowledge.incumbent_facts import incumbent_evidence, profile_incumbent
from aka.knowledge.lessons import top_lessons, write_lessons
from aka.run import gitops
from aka.run.standing import start_standing
from aka.run.store import RunStore
from aka.run.supervisor import (
    BudgetUsed,
    Decision,
    Measurements,
    decide,
    promotion_message,
    promotion_meta,
    stop_reason,
)
from aka.run.toolbench import ToolBench
from aka.settings import OptimizeSettings


class View(Protocol):
    def update(self, **fields: Any) -> None: ...


class _Quiet:
    def update(self, **fields: Any) -> None:
        pass


@dataclass
class State:
    """What the next round needs; a pure function of run.json and the attempts log."""

    used: BudgetUsed
    best: float | None  # best geomean speedup over the baseline (bench screen)
    incumbent: Path
    incumbent_label: str
    incumbent_times: dict[str, float]
    incumbent_score: float = 1.0  # the incumbent's geomean speedup over the baseline
    incumbent_shapes: dict[str, float] = field(default_factory=dict)  # ... and per shape
    seen: dict[str, int] = field(default_factory=dict)  # code hash -> attempt that measured it


def shape_plan(settings: OptimizeSettings) -> tuple[list[list[str]], str, int]:
    """Gate stages, bench shapes and gate rounds: the full set only off the interpreter."""
    if settings.interpreter:
        return [list(settings.cpu_gate_sets)], settings.cpu_bench_shapes, settings.cpu_gate_rounds
    return [["smoke", "edge"], ["full"]], "full", settings.gate_rounds


def rebuild(store: RunStore, run: dict[str, Any]) -> State:
    base, inc = run["baseline"]["baseline_us"], run["baseline"]["incumbent_us"]
    # runs recorded before the standing was: the set-up's timings
    start = run["incumbent"].get("standing") or {"geomean": speedup(base, inc) or 1.0,
                                                 "shapes": {s: b / inc[s] for s, b in base.items() if inc.get(s)}}
    st = State(BudgetUsed(elapsed_s=run.get("setup_s", 0.0)), None, Path(run["incumbent"]["path"]),
               run["incumbent"]["label"], dict(inc), start["geomean"], dict(start["shapes"]))
    st.seen[run["incumbent"]["hash"]] = -1
    for rec in store.attempts():
        st.used.candidates += 1
        st.used.elapsed_s += rec.get("duration_s", 0.0)
        st.used.tokens += rec.get("tokens", 0)
        st.used.since_improvement = 0 if rec.get("improved") else st.used.since_improvement + 1
        if rec.get("score") is not None:
            st.best = rec["score"] if st.best is None else max(st.best, rec["score"])
        if rec.get("code_hash"):
            st.seen.setdefault(rec["code_hash"], rec["n"])
        if rec["decision"]["promote"]:
            st.incumbent = store.path / "candidates" / f"{rec['n']}.py"
            st.incumbent_label = f"candidate {rec['n']}"
            st.incumbent_times = dict(rec["bench"]["times_us"])
            # the standing over the baseline (aka.run.standing): the start's chained through each
            # promotion's ABBA re-measure (the screen's times drift by several % between workers)
            m = rec["measurements"]
            st.incumbent_score *= m["geomean"]
            st.incumbent_shapes = {s: st.incumbent_shapes.get(s, 1.0) * r for s, r in m["ratios"].items()}
    return st


class SetupError(AkaError):
    """The baseline could not be measured, so no candidate can be judged."""


def prepare_run(runs_root: Path, settings: OptimizeSettings, op, evaluator: Evaluator) -> RunStore:
    """Create the run directory and pay once for the baseline figures every decision needs."""
    t0 = time.monotonic()
    # on every device: an edited promoted.py would otherwise be measured as the incumbent (and on a
    # GPU refused only at the first promotion, after the search)
    if settings.commit:
        gitops.check_clean(op.root, op.name)
    device = evaluator.device()
    _, bench_shapes, _ = shape_plan(settings)
    incumbent = op.default_kernel()
    figures = {}
    compiled = {path: evaluator.compile(path) for path in {op.path("baseline"), incumbent}}  # into Triton's cache
    # the incumbent's registers/spills steer the first plans (on CPU: an "unavailable" record)
    figures["incumbent_compile"] = compiled[incumbent].detail.get("compile_stats")
    for label, path in {"baseline": op.path("baseline"), "incumbent": incumbent}.items():
        if label == "incumbent" and path == op.path("baseline"):
            figures["incumbent_us"] = figures["baseline_us"]
            continue
        b = evaluator.bench(path, bench_shapes)
        if b.error or not b.times_us:
            raise SetupError(f"{op.name}: timing the {label} ({path.name}) failed: {b.error or 'no times'}")
        figures[f"{label}_us"], figures["timing"] = b.times_us, b.timing
        figures["incumbent_roofline"] = b.roofline  # the last one timed is the incumbent
    if settings.interpreter:  # external libraries against interpreter timings would mean nothing
        figures["competitors_us"], figures["competitors_notes"] = {}, ["competitors not timed: CPU interpreter"]
    elif not settings.competitors:
        figures["competitors_us"], figures["competitors_notes"] = {}, ["competitors not timed: --no-competitors"]
    else:  # once, for the report: where the incumbent stands against fla / sdpa
        figures["competitors_us"], figures["competitors_notes"] = evaluator.competitors(bench_shapes)
    gate_sets, _, rounds = shape_plan(settings)
    g = evaluator.gate(incumbent, gate_sets[0], rounds, settings.seed)  # a failing incumbent explains everything
    figures["incumbent_gate"] = {"sets": gate_sets[0], "ok": bool(g.passed) and not g.error, "error": g.error}
    source = incumbent.read_text()
    lessons = top_lessons(runs_root / op.name)  # earlier runs only: read before this run's folder exists
    store = RunStore.create(runs_root, op.name, {})
    copy = store.write_candidate("incumbent", source)  # a stable copy: another run may replace promoted.py
    run = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "status": "running", "settings": settings.model_dump(),
        "device": device,
        "baseline": {**figures, "shapes": bench_shapes, "hash": code_hash(op.path("baseline").read_text())},
        "incumbent": {"label": incumbent.stem, "path": str(copy), "hash": code_hash(source),
                      "standing": start_standing(op, incumbent, figures)},
        "promoted_at_start": gitops.read_promoted_meta(op.root, op.name).get("code_hash"),
        "lessons": lessons,
        "setup_s": round(time.monotonic() - t0, 3),
    }
    store.update_run(**run)
    return store


def run_loop(store: RunStore, settings: OptimizeSettings, op, backend: Backend, evaluator: Evaluator,
             view: View | None = None, profiler=None) -> dict[str, Any]:
    """Run rounds until a stop condition; returns the run summary (also written to run.json).

    Up to `prepare_ahead` later candidates are generated (one after another) and checked and
    compiled (in parallel worker processes) while candidate n is gated and timed: compilation is
    CPU work, GPU timing stays serial. However the run ends (budget, exhausted backend, Ctrl-C, a
    crash), what it learned is written to lessons.jsonl.
    """
    view = view or _Quiet()
    try:
        view.update(stage="profile the incumbent")
        profile_incumbent(store, op, settings, profiler)  # once per run; a resume reads run.json
        return _rounds(store, settings, op, backend, evaluator, view)
    finally:
        try:
            write_lessons(store.path)
        except (AkaError, OSError) as exc:  # a bad log line must not hide why the run ended
            store.update_run(lessons_error=str(exc)[:300])


def _rounds(store: RunStore, settings: OptimizeSettings, op, backend: Backend, evaluator: Evaluator,
            view: View) -> dict[str, Any]:
    run = store.read_run()
    st = rebuild(store, run)
    with store.op_lock():
        finish_pending_promotion(store, settings, op)
    reason, fault, queue = None, None, deque()
    make = functools.partial(generate, store=store, settings=settings, op=op, backend=backend, ev=evaluator,
                             run=run, view=view)
    while reason is None:
        reason = stop_reason(settings.budget, st.used)
        if reason:
            break
        n, t0 = st.used.candidates, time.monotonic()
        view.update(attempt=n, stage="plan", best=st.best, left=settings.budget.max_candidates - n)
        while len(queue) < 1 + settings.prepare_ahead and n + len(queue) < settings.budget.max_candidates:
            queue.append(Job(n + len(queue), queue[-1] if queue else None, make, st))
        try:
            prep = queue.popleft().result()
        except BackendExhausted as exc:
            reason = str(exc)
            break
        except ProviderError as exc:  # the endpoint's fault: no attempt is charged, the run stops and says why
            reason, fault = f"LLM endpoint fault: {exc}", exc.record()
            break
        view.update(stage="measure", candidate=prep.summary)
        rec = measure(prep, settings, op, evaluator, st, run, view)
        with store.op_lock():  # another run of this op may be promoting right now
            if rec["decision"]["promote"]:
                rec["decision"] = still_current(store, op, Decision(**rec["decision"])).model_dump()
            rec["duration_s"] = round(time.monotonic() - t0, 3)  # wall time of the round (preparation overlaps)
            store.append_attempt(rec)  # fsynced: from here on this attempt is never redone
            if rec["decision"]["promote"]:
                finish_pending_promotion(store, settings, op)
        st = rebuild(store, run)
        for job in queue:  # queued candidates are judged against the new incumbent when their turn comes
            job.st = st
        view.update(stage="decided", record=rec, best=st.best)
    summary = summarize(store, reason, **({"fault": fault} if fault else {}))
    store.update_run(status="stopped" if fault else "finished", summary=summary)
    return summary


def summarize(store: RunStore, reason: str, **extra: Any) -> dict[str, Any]:
    """The run's summary from its log: the same figures however it ended (budget, Ctrl-C, a fault)."""
    st = rebuild(store, store.read_run())
    return {"stop_reason": reason, "attempts": st.used.candidates, "best_score": st.best,
            "incumbent": st.incumbent_label, "elapsed_s": round(st.used.elapsed_s, 1), "tokens": st.used.tokens,
            **extra}


@dataclass
class Prepared:
    """A candidate up to compilation: its record so far and what the static stages found."""

    rec: dict[str, Any]
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
        if self.prep is not None and not self.prep.rec["failed_stage"]:
            _verify_into(self.prep, make.keywords["ev"])

    def result(self) -> Prepared:
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.prep


def generate(n: int, *, store: RunStore, settings: OptimizeSettings, op, backend: Backend, ev: Evaluator,
             st: State, run: dict[str, Any], pending: list[Prepared], view: View) -> Prepared:
    """Plan and write candidate n; the static check and compile follow in _verify_into."""
    t0 = time.monotonic()
    incumbent = st.incumbent.read_text()
    history = store.attempts()
    spent = st.used.tokens + sum(p.rec.get("tokens", 0) for p in pending)
    cands = store.path / "candidates"
    ctx = Context(op=op.name, attempt=n, incumbent_source=incumbent, incumbent_label=st.incumbent_label,
                  baseline_path=str(op.path("baseline")), kernel_dir=str(op.path("baseline").parent),
                  hardware=run["device"], history=history, seed=settings.seed,
                  pending=[p.rec for p in pending], run_dir=str(store.path), root=str(op.root),
                  evidence=incumbent_evidence(run, history),
                  incumbent_score=st.incumbent_score,
                  verify=lambda src: _verify(src, cands / f"{n}.draft.py", ev),
                  notify=view.update, lessons=list(run.get("lessons") or []),
                  workbench=ToolBench(ev, op, settings, cands / f"{n}.tool.py", st.incumbent,
                                      settings.seed + 1000 * n + 500),
                  tokens_left=None if settings.budget.max_tokens is None else settings.budget.max_tokens - spent)
    rec: dict[str, Any] = {"n": n, "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "failed_stage": "",
                           "evidence_offered": [e["id"] for e in ctx.evidence]}
    _, bench_shapes, _ = shape_plan(settings)
    m = Measurements(expected_shapes=[c.id for c in op.cases(bench_shapes)])
    try:
        plan, use1 = backend.plan(ctx)
        rec.update(plan=plan.model_dump(), config=plan.fixed_config())
        source, use2 = backend.candidate(plan, ctx)
    except AttemptFailed as exc:  # an unusable answer: recorded, its tokens counted, the run goes on
        used = exc.usage + (use1 if "plan" in rec else Usage())
        rec.update(failed_stage=exc.stage, usage=used.model_dump(), tokens=used.total, code_hash="", **ctx.trace)
        m.backend_error = f"{exc.stage}: {exc}"
        return Prepared(rec, cands / f"{n}.py", m, f"({exc.stage} failed)")
    usage = use1 + use2
    # the edit is what later prompts show of this attempt (history, and in flight while it is measured)
    rec.update(usage=usage.model_dump(), tokens=usage.total, code_hash=code_hash(source),
               edit=compact_diff(incumbent, source), **ctx.trace)
    path = store.write_candidate(n, source)
    seen = dict(st.seen, **{p.rec["code_hash"]: p.rec["n"] for p in pending})
    if rec["code_hash"] in seen:
        rec["failed_stage"] = "duplicate"
        m.backend_error = f"identical code already measured (attempt {seen[rec['code_hash']]}); not re-measured"
    rec["prepare_s"] = round(time.monotonic() - t0, 3)
    return Prepared(rec, path, m, plan.summary(), source)


def _verify_into(prep: Prepared, ev: Evaluator) -> None:
    t0 = time.monotonic()
    stage, error = _verify(prep.source, prep.path, ev, prep.rec)
    if stage:
        prep.rec["failed_stage"] = stage
        setattr(prep.m, f"{stage}_error", error or "failed")
    prep.rec["prepare_s"] = round(prep.rec.get("prepare_s", 0.0) + time.monotonic() - t0, 3)


def _verify(source: str, path: Path, ev: Evaluator, rec: dict[str, Any] | None = None) -> tuple[str, str]:
    """Static check then compile: ('', '') when both pass, else (stage, error)."""
    if rec is None:  # a draft from a backend's repair loop
        path.write_text(source)
    chk = ev.check(source)
    if rec is not None:
        rec["check"] = {"ok": chk.ok, "error": chk.error}
    if not chk.ok:
        return "check", chk.error
    comp = ev.compile(path)
    if rec is not None:
        kept = {k: v for k, v in comp.detail.items() if k != "launches"}  # the tools' input, not a record
        rec["compile"] = {"ok": comp.ok, "error": comp.error, **kept}
    return ("", "") if comp.ok else ("compile", comp.error)


def measure(prep: Prepared, settings: OptimizeSettings, op, ev: Evaluator, st: State, run: dict[str, Any],
            view: View) -> dict[str, Any]:
    """Gate and time a prepared candidate, then let the Supervisor decide."""
    rec, m, path = prep.rec, prep.m, prep.path
    gate_stages, bench_shapes, rounds = shape_plan(settings)
    score = None
    if not rec["failed_stage"]:
        view.update(stage=f"gate {'+'.join(gate_stages[0])} + bench {bench_shapes}")
        g, b = ev.screen(path, gate_stages[0], rounds, settings.seed + 1000 * rec["n"], bench_shapes,
                         incumbent=st.incumbent)
        _gate_into(rec, m, g, gate_stages[0])
        if not rec["failed_stage"] and b is not None:
            score = _bench_into(rec, m, b, run, st)
    vs_inc = rec.get("bench", {}).get("vs_incumbent") if score is not None else None
    # only promising candidates earn the expensive stages; nothing else may touch the GPU meanwhile
    if m.timing == "gpu" and vs_inc is not None and vs_inc - 1 > settings.rules.min_gain / 2:
        view.update(stage="compare (ABBA)")
        c = ev.compare(st.incumbent, path, bench_shapes)
        rec["compare"] = {"speedups": c.speedups, "geomean": c.geomean, "noise": c.noise,
                          "timing": c.timing, "error": c.error}
        if c.timing == "gpu" and not c.error:
            m.ratios, m.geomean, m.noise = c.speedups, c.geomean, c.noise
        elif c.error.startswith("check:"):  # its timed outputs or times failed the checker: the candidate's fault
            m.bench_error = f"ABBA re-measure rejected it: {c.error}"
        # the full-set gate (float64 references of long sequences: the dearest stage) only for a
        # candidate the comparison would promote; the decision itself still reads the real gate
        full = [s for stage in gate_stages[1:] for s in stage]
        assumed = {"gate_sets": m.gate_sets + full, "gate": {**{s: [True] for s in m.expected_shapes}, **m.gate}}
        if full and decide(m.model_copy(update=assumed), settings.rules).promote:
            for sets in gate_stages[1:]:
                view.update(stage="gate " + "+".join(sets))
                _gate_into(rec, m, ev.gate(path, sets, rounds, settings.seed + 1000 * rec["n"] + 1), sets)
    elif m.timing == "gpu" and vs_inc is not None:
        m.screen_gain = vs_inc - 1
    rec["score"] = score
    rec["improved"] = score is not None and (st.best is None or score > st.best)
    rec["measurements"] = m.model_dump()
    rec["decision"] = decide(m, settings.rules).model_dump()
    return rec


def _gate_into(rec: dict[str, Any], m: Measurements, g, sets: list[str]) -> None:
    m.gate.update(g.passed)
    m.gate_sets += sets
    rec["gate"] = {"sets": m.gate_sets, "passed": m.gate, "error": g.error, **g.detail}
    if g.error or not g.passed or not all(all(r) for r in g.passed.values()):
        rec["failed_stage"], m.gate_error = "gate", g.error or "a shape failed"


def _bench_into(rec: dict[str, Any], m: Measurements, b, run: dict[str, Any], st: State) -> float | None:
    rec["bench"] = {"times_us": b.times_us, "timing": b.timing, "error": b.error, "roofline": b.roofline}
    m.timing = b.timing if b.timing in ("gpu", "interpreter") else "none"
    if b.error or not b.times_us:
        rec["failed_stage"], m.bench_error = "bench", b.error or "no timings"
        return None
    paired = speedup(b.incumbent_us, b.times_us) if b.incumbent_us else None
    if paired is not None:  # the incumbent timed beside it: chain that ratio to the incumbent's standing
        score, vs_inc = st.incumbent_score * paired, paired
        rec["bench"]["incumbent_us"] = b.incumbent_us
    else:  # against the figures of the setup (CPU, or an evaluator without paired timing)
        score = speedup(run["baseline"]["baseline_us"], b.times_us)
        vs_inc = speedup(st.incumbent_times, b.times_us)
    rec["bench"].update(vs_baseline=score, vs_incumbent=vs_inc, paired=paired is not None)
    return score


def still_current(store: RunStore, op, decision: Decision) -> Decision:
    """Another run may have promoted meanwhile: then our comparison was against a stale incumbent."""
    promoted = [r for r in store.attempts() if r["decision"]["promote"]]
    expected = promoted[-1]["code_hash"] if promoted else store.read_run().get("promoted_at_start")
    current = gitops.read_promoted_meta(op.root, op.name).get("code_hash")
    if current != expected:
        return Decision(promote=False, verdict="rejected",
                        reason=f"the promoted kernel changed during this run (now {current}); re-run against it")
    return decision


def finish_pending_promotion(store: RunStore, settings: OptimizeSettings, op) -> None:
    """Apply the last promote decision of the log unless run.json notes it done (idempotent, resume-safe).

    A kill can land anywhere between the log line and the note: before the files, between files
    and commit, or after the commit. Re-writing the same bytes and committing only what differs
    from HEAD finishes each of those cases exactly once.
    """
    promoted = [r for r in store.attempts() if r["decision"]["promote"]]
    run = store.read_run()
    if not promoted or promoted[-1]["n"] in [p["n"] for p in run.get("promotions", [])]:
        return
    rec = promoted[-1]
    source = (store.path / "candidates" / f"{rec['n']}.py").read_text()
    st = rebuild(store, run)  # its standing includes this promotion
    meta = promotion_meta(run, rec, (st.incumbent_score, st.incumbent_shapes))
    # with --no-commit this run's earlier promotions are still uncommitted edits: its own, replaceable
    earlier = () if settings.commit else tuple((store.path / "candidates" / f"{r['n']}.py").read_text()
                                               for r in promoted[:-1])
    commit = gitops.promote(op.root, op.name, source, meta, promotion_message(run, rec, meta), settings.commit,
                            earlier=earlier)
    store.update_run(promotions=[*run.get("promotions", []), {"n": rec["n"], "commit": commit}])
