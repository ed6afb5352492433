"""The optimisation loop: plan -> candidate -> check -> compile -> gate -> bench -> decide -> record.

Read run_loop() top to bottom: one round per candidate until the budget says stop. Every stage
is reached through the Evaluator (aka.evaluate.parent.evaluator), the backend (aka.agent.llm) or the
Supervisor's pure decide(); this module only sequences them and records what happened: the run's
set-up is aka.run.setup, candidates prepared ahead aka.run.prefetch, one candidate's gate, timing
and decision aka.run.measure, a promotion's git step aka.run.promote. State that matters for the
next round (budget used, best score, incumbent) is rebuilt from attempts.jsonl, so a resumed run
continues exactly where the log ends: finished attempts are never repeated, the one in flight
when the process died is redone.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from typing import Any

from aka.agent.llm.base import Backend, BackendExhausted, ProviderError
from aka.errors import AkaError, WorkersLost
from aka.evaluate.parent.evaluator import Evaluator
from aka.knowledge.incumbent_facts import profile_incumbent
from aka.knowledge.lessons import write_lessons
from aka.knowledge.measured import record_run
from aka.records import Attempt
from aka.run.deferred import after_candidates
from aka.run.pool import Pool, make_pool
from aka.run.prefetch import Job, Prepared, Quiet, View, generate
from aka.run.promote import finish_pending_promotion, still_current
from aka.run.state import rebuild
from aka.run.store import RunStore, cache_dir
from aka.run.supervisor import stop_reason
from aka.settings import OptimizeSettings


def run_loop(store: RunStore, settings: OptimizeSettings, op, backend: Backend, evaluator: Evaluator,
             view: View | None = None, profiler=None, pool: Pool | None = None,
             head: deque[Job] | None = None) -> dict[str, Any]:
    """Run rounds until a stop condition; returns the run summary (also written to run.json).

    Up to `prepare_ahead` later candidates are generated (one after another) and checked and
    compiled (in parallel worker processes) while candidate n is gated and timed: compilation is
    CPU work, GPU timing stays serial per GPU. With a pool of several workers (`--gpus N`,
    `--cluster`), up to N candidates are measured at once and recorded in candidate order.
    However the run ends (budget, exhausted backend, Ctrl-C, a crash), what it learned is written
    to lessons.jsonl, and what it measured on a GPU to kernels/<op>/knowledge.json (aka.knowledge.measured).
    `head`: the first candidates, started during the set-up (aka.run.prefetch.head_start).
    """
    view = view or Quiet()
    cache = cache_dir(store.path.parent.parent, op.name)
    try:
        # from the cache, or deferred until after the candidates (a resume reads run.json)
        profile_incumbent(store, op, settings, profiler, cache)
        pool = pool or make_pool(settings, op, evaluator, store.read_run(), view)
        if fields := pool.run_fields():
            store.update_run(**fields)
        try:
            summary = _rounds(store, settings, op, backend, evaluator, view, pool, head or deque())
        finally:
            pool.close()
        after_candidates(store, settings, op, evaluator, view, profiler)
        return summary
    finally:
        try:
            write_lessons(store.path)
        except (AkaError, OSError) as exc:  # a bad log line must not hide why the run ended
            store.update_run(lessons_error=str(exc)[:300])
        try:  # what each structure and value measured against its incumbent, for every later run
            if n := record_run(store, op):
                store.update_run(knowledge_recorded=n)
        except (AkaError, OSError) as exc:
            store.update_run(knowledge_error=str(exc)[:300])


def _rounds(store: RunStore, settings: OptimizeSettings, op, backend: Backend, evaluator: Evaluator,
            view: View, pool: Pool, queue: deque[Job]) -> dict[str, Any]:
    run = store.read_run()
    st = rebuild(store, run)
    for job in queue:  # started during the set-up: those not yet planned plan from the state it ended with
        job.st = st
    with store.op_lock():
        finish_pending_promotion(store, settings, op)
    reason, fault, lost = None, None, None
    make = functools.partial(generate, store=store, settings=settings, op=op, backend=backend, ev=evaluator,
                             run=run, view=view)
    cap = settings.budget.max_candidates
    flight: dict[int, tuple[Prepared, str]] = {}  # n -> (candidate, the incumbent it is measured against)
    done: dict[int, Attempt] = {}
    nxt, t_last = st.used.candidates, time.monotonic()
    while True:
        reason = reason or stop_reason(settings.budget, st.used)
        while reason is None and len(flight) < pool.slots and nxt < cap:  # a free worker: hand it the next one
            view.update(attempt=nxt, stage="plan", best=st.best, left=cap - st.used.candidates)
            while len(queue) < pool.slots + settings.prepare_ahead and nxt + len(queue) < cap:
                queue.append(Job(nxt + len(queue), queue[-1] if queue else None, make, st))
            try:
                t_wait = time.monotonic()
                prep = queue.popleft().result()
                prep.rec.stage_s["wait"] = round(time.monotonic() - t_wait, 3)
            except BackendExhausted as exc:
                reason = str(exc)
            except ProviderError as exc:  # the endpoint's fault: no attempt is charged, the run stops and says why
                reason, fault = f"LLM endpoint fault: {exc}", exc.record()
            else:
                flight[prep.rec.n] = (prep, st.incumbent_label)
                nxt += 1
                pool.submit(prep, st)
        if not flight or lost:
            break
        try:
            done.update(pool.wait())
        except WorkersLost as exc:  # the harness's fault: what finished is recorded, the rest is redone on resume
            lost = str(exc)
            reason = f"evaluation workers lost: {lost}"  # nothing more is handed out
        if fields := pool.run_fields():
            store.update_run(**fields)
        while st.used.candidates in done:  # in candidate order, so the log reads as a serial run's
            n = st.used.candidates
            rec = done.pop(n)
            prep, against = flight[n]
            if rec.promoted and against != st.incumbent_label:
                # measured against an incumbent that a lower-numbered candidate replaced meanwhile:
                # its comparison is stale, so it is measured again against the new one (on resume,
                # when the workers are gone)
                if lost:
                    break
                flight[n] = (prep, st.incumbent_label)
                pool.submit(prep, st)
                break
            del flight[n]
            with store.op_lock():  # another run of this op may be promoting right now
                if rec.promoted:
                    rec.decision = still_current(store, op, rec.decision)
                now = time.monotonic()
                rec.duration_s = round(now - t_last, 3)  # wall time since the previous record (work overlaps)
                t_last = now
                store.append_attempt(rec)  # fsynced: from here on this attempt is never redone
                if rec.promoted:
                    finish_pending_promotion(store, settings, op)
            st = rebuild(store, run)
            for job in queue:  # queued candidates are judged against the new incumbent when their turn comes
                job.st = st
            view.update(stage="decided", record=rec, best=st.best)
    summary = summarize(store, reason, **({"fault": fault} if fault else {}),
                        **({"workers_lost": lost} if lost else {}))
    store.update_run(status="stopped" if fault or lost else "finished", summary=summary)
    return summary


def summarize(store: RunStore, reason: str, **extra: Any) -> dict[str, Any]:
    """The run's summary from its log: the same figures however it ended (budget, Ctrl-C, a fault)."""
    st = rebuild(store, store.read_run())
    return {"stop_reason": reason, "attempts": st.used.candidates, "best_score": st.best,
            "incumbent": st.incumbent_label, "elapsed_s": round(st.used.elapsed_s, 1), "tokens": st.used.tokens,
            **extra}
