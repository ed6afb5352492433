"""Where prepared candidates are measured: here, one at a time (InlinePool, `--gpus 1`, the default),
or several at once on Ray workers, one GPU each (aka.run.raypool, `--gpus N` / `--cluster`).

A pool only measures (gate, timing, ABBA, the Supervisor's decide() inside aka.run.measure); the
loop hands it candidates, collects what finished, and records in candidate order. Each measurement
works on its own copy of the prepared candidate, so one measured against an incumbent that was
replaced meanwhile can be handed in again unchanged.
"""

from __future__ import annotations

from typing import Any, Protocol

from aka.records import Attempt, RunRecord
from aka.run.measure import measure_copy
from aka.run.prefetch import Prepared, View
from aka.run.state import State
from aka.settings import OptimizeSettings


class Pool(Protocol):
    slots: int  # candidates measured at once

    def submit(self, prep: Prepared, st: State) -> None: ...
    def wait(self) -> list[tuple[int, Attempt]]: ...  # blocks until at least one submitted candidate finished
    def run_fields(self) -> dict[str, Any]: ...  # what run.json records of the pool ({} when nothing)
    def close(self) -> None: ...


class InlinePool:
    """One candidate at a time in this process, through the run's own evaluator: the loop as it has
    always run (submit measures, wait hands the record back)."""

    slots = 1

    def __init__(self, settings: OptimizeSettings, op, evaluator, run: RunRecord, view: View):
        self.settings, self.op, self.ev, self.run, self.view = settings, op, evaluator, run, view
        self._done: list[tuple[int, Attempt]] = []

    def submit(self, prep: Prepared, st: State) -> None:
        self.view.update(stage="measure", candidate=prep.summary)
        self._done.append((prep.rec.n, measure_copy(prep, self.settings, self.op, self.ev, st, self.run, self.view)))

    def wait(self) -> list[tuple[int, Attempt]]:
        out, self._done = self._done, []
        return out

    def run_fields(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


def make_pool(settings: OptimizeSettings, op, evaluator, run: RunRecord, view: View) -> Pool:
    """The pool the settings ask for: inline for one local GPU, Ray workers otherwise."""
    if settings.gpus == 1 and not settings.cluster:
        return InlinePool(settings, op, evaluator, run, view)
    from aka.run.raypool import RayPool  # the one module that imports ray

    return RayPool(settings, op, run, view)
