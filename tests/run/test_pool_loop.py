"""The loop with several candidates in flight (issue 22), on CPU with the fake evaluator: a pool of
two slots that hands results back out of order, a candidate measured against an incumbent replaced
meanwhile, and the same decisions as the one-at-a-time loop."""

from __future__ import annotations

from fakes import FakeEvaluator, source

from aka.agent.llm.scripted import ScriptedBackend
from aka.run.loop import run_loop
from aka.run.measure import measure_copy
from aka.run.prefetch import Quiet
from aka.run.setup import prepare_run
from aka.settings import Budget, OptimizeSettings

STEPS = [
    {"source": source(1.2, tag="a")},  # promoted (+20%)
    {"source": source(1.5, tag="b")},  # measured beside a: +50% over the baseline it was compared with
    {"source": source(1.1, tag="c")},  # slower than a
    {"source": source(1.3, gate="fail")},
    {"source": source(1.2, tag="a")},  # a again: a duplicate
    {"source": source(1.9, tag="d", slow="G4:0.5")},  # faster overall, G4 much slower
]


class TwoSlots:
    """Two candidates at once; each wait() hands back the later-numbered one first when both finished."""

    slots = 2

    def __init__(self, settings, op, ev, run):
        self.settings, self.op, self.ev, self.run = settings, op, ev, run
        self.events: list = []
        self.flight: list = []
        self.submitted: list[tuple[int, str]] = []  # (candidate, incumbent label it was measured against)

    def submit(self, prep, st):
        self.submitted.append((prep.rec.n, st.incumbent_label))
        self.flight.append((prep, st))

    def wait(self):
        if len(self.flight) < self.slots and self.submitted[-1][0] < self.settings.budget.max_candidates - 1:
            return []  # nothing finishes before the pool is full, except at the end of the budget
        out = [(p.rec.n, measure_copy(p, self.settings, self.op, self.ev, st, self.run, Quiet()))
               for p, st in self.flight]
        self.flight = []
        return out[::-1]

    def run_fields(self):
        return {}

    def close(self):
        pass


def _run(project, op, pool_cls=None):
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=len(STEPS)), commit=True,
                                prepare_ahead=1)
    ev = FakeEvaluator(op, timing="gpu")
    store = prepare_run(project / "runs", settings, op, ev)
    pool = pool_cls(settings, op, ev, store.read_run()) if pool_cls else None
    summary = run_loop(store, settings, op, ScriptedBackend(STEPS), ev, pool=pool)
    return store, summary, pool


def test_two_in_flight_record_in_order_and_remeasure_a_stale_promotion(project, op):
    store, summary, pool = _run(project, op, TwoSlots)
    att = store.attempts()
    assert [a.n for a in att] == list(range(len(STEPS)))  # the log reads as a serial run's
    # b was measured beside a against the baseline; a was promoted first, so b's promotion was stale
    # and b was measured again, against a: +25%, promoted
    assert pool.submitted.count((1, "baseline")) == 1 and (1, "candidate 0") in pool.submitted
    assert [a.decision.verdict for a in att[:2]] == ["promoted", "promoted"]
    assert abs(att[1].measurements.geomean - 1.25) < 1e-9
    assert att[2].decision.verdict == "rejected" and att[3].failed_stage == "gate"
    assert att[4].failed_stage == "duplicate" and "G4 slower" in att[5].decision.reason
    assert summary["incumbent"] == "candidate 1" and summary["attempts"] == len(STEPS)


def test_two_slots_decide_as_the_one_at_a_time_loop(project, op, tmp_path):
    serial, _, _ = _run(project, op)
    from fakes import make_project

    other = make_project(tmp_path / "second")
    from aka.contract.ops import get_op

    parallel, _, _ = _run(other, get_op("gdn_prefill", other), TwoSlots)
    one = [(a.n, a.code_hash, a.decision.verdict, a.failed_stage) for a in serial.attempts()]
    two = [(a.n, a.code_hash, a.decision.verdict, a.failed_stage) for a in parallel.attempts()]
    assert one == two


class LosesWorkers(TwoSlots):
    """Hands back candidate 0, then reports its workers gone for good."""

    def wait(self):
        if any(p.rec.n == 0 for p, _ in self.flight):
            out = [(0, measure_copy(p, self.settings, self.op, self.ev, st, self.run, Quiet()))
                   for p, st in self.flight if p.rec.n == 0]
            self.flight = [(p, st) for p, st in self.flight if p.rec.n != 0]
            return out
        from aka.errors import WorkersLost

        raise WorkersLost("candidate 1 lost its worker twice (actor died)")


def test_lost_workers_stop_the_run_with_what_finished_recorded(project, op):
    store, summary, _ = _run(project, op, LosesWorkers)
    assert [a.n for a in store.attempts()] == [0]  # candidate 1 is redone on resume, never charged
    assert summary["workers_lost"].startswith("candidate 1 lost its worker twice")
    assert summary["stop_reason"].startswith("evaluation workers lost")
    assert store.read_run().status == "stopped"


def test_the_timing_lock_is_per_device():
    from aka.evaluate.parent.evaluator import timing_device

    assert timing_device({}) == "0"  # nothing pinned: CUDA's device 0
    assert timing_device({"CUDA_VISIBLE_DEVICES": "3"}) == "3"  # a Ray worker pinned to GPU 3
    assert timing_device({"CUDA_VISIBLE_DEVICES": "GPU-ab12/x,1"}) == "GPU-ab12x"
