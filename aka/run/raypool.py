"""Candidates measured on Ray workers, one GPU each (`aka optimize --gpus N`, `--cluster ADDRESS`).

The one module that imports ray (the optional extra `aka[ray]`). Each worker is a Ray actor holding
its own evaluator (aka.evaluate.parent.evaluator.RealEvaluator: the same isolated worker processes, gate and
bench as a local run) and pinned to one GPU by Ray (`num_gpus=1`, so CUDA_VISIBLE_DEVICES names
that GPU to the actor and to every process it starts; the evaluator's timing lock is per device).
The driver keeps planning, check and compile, the Supervisor's records and git; a worker receives
a prepared candidate with its source and the incumbent's source, measures it with aka.run.measure
and returns the typed Attempt.

Faults are the harness's, never the candidate's: a worker that dies mid-candidate is replaced and
the candidate handed to a worker again, once; a second loss, or a lost cluster, stops the run
(WorkersLost) with everything finished recorded, so it resumes locally or on the cluster.
In the interpreter (no GPU) `--gpus N` runs N CPU workers standing in for GPUs, labelled as such.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aka
from aka.errors import AkaError, WorkersLost
from aka.records import Attempt, RunRecord
from aka.run.prefetch import Prepared, Quiet, View
from aka.run.state import State
from aka.settings import OptimizeSettings

EXTRA = "pip install 'aka[ray]'"


def require_ray():
    try:
        import ray
    except ImportError:
        raise AkaError(f"--gpus above 1 and --cluster measure candidates on Ray workers: {EXTRA}") from None
    return ray


def worker_folder(base: str | None = None) -> Path:
    """The folder a Ray worker writes the sources it is sent into, named like aka's worker folders
    (aka-worker-<pid>-...) so that the next aka process on that machine removes it once the worker's
    process is gone (aka.evaluate.parent.runner.sweep_stale_folders): Ray kills actors without a clean-up."""
    from aka.evaluate.parent.runner import WORKER_PREFIX

    return Path(tempfile.mkdtemp(prefix=f"{WORKER_PREFIX}{os.getpid()}-ray-", dir=base))


class EvalWorker:
    """Inside the Ray actor: an evaluator for the op, and a folder for the sources it is sent."""

    def __init__(self, op_name: str, root: str, settings: dict[str, Any], factory: Callable | None = None):
        from aka.contract.ops import get_op
        from aka.evaluate.parent.evaluator import RealEvaluator

        self.settings = OptimizeSettings.model_validate(settings)
        self.op = get_op(op_name, Path(root) if root else Path.cwd())
        self.ev = factory(self.op, self.settings) if factory else RealEvaluator(self.op, self.settings)
        self.dir = worker_folder()

    def device(self) -> dict[str, Any]:
        import ray

        return {**self.ev.device(), "node": ray.util.get_node_ip_address(), "pid": os.getpid(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}

    def measure(self, prep: Prepared, st: State, run: RunRecord, source: str, incumbent: str) -> Attempt:
        from aka.evaluate.parent.outcomes import code_hash
        from aka.run.measure import measure_copy

        prep.path = self.dir / f"{prep.rec.n}.py"
        prep.path.write_text(source)
        st.incumbent = self.dir / f"incumbent-{code_hash(incumbent)}.py"
        st.incumbent.write_text(incumbent)
        return measure_copy(prep, self.settings, self.op, self.ev, st, run, Quiet())


class RayPool:
    """`slots` Ray workers; candidates go to idle ones, results come back as they finish."""

    def __init__(self, settings: OptimizeSettings, op, run: RunRecord, view: View, *,
                 factory: Callable | None = None, init: dict[str, Any] | None = None):
        self.ray = ray = require_ray()
        self.settings, self.op, self.run, self.view, self.factory = settings, op, run, view, factory
        self.slots = settings.gpus
        self.events: list[dict[str, Any]] = []
        self._own = not ray.is_initialized()
        if self._own:
            # Ray's start-up notices would interleave with the progress display: errors only
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR,
                                  **(init or {})}
            if settings.cluster:
                # the workers run this driver's aka on this project's contracts and kernels, shipped by
                # Ray (runs/, git and environments stay here); their Python needs aka's dependencies
                kw["address"] = settings.cluster
                kw.setdefault("runtime_env", {"working_dir": str(op.root),
                                              "py_modules": [str(Path(aka.__file__).parent)],
                                              "excludes": ["runs/", ".git/", ".venv/", "__pycache__/"]})
            elif settings.interpreter:
                kw.setdefault("num_cpus", self.slots)  # CPU workers standing in for GPUs
            try:
                ray.init(**kw)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise AkaError(f"cannot start or reach Ray ({settings.cluster or 'local'}): "
                               f"{' '.join(str(exc).split())[:200]}") from None
        self._resources = {"num_cpus": 1} if settings.interpreter else {"num_gpus": 1}
        self._cls = None
        kind = "CPU" if settings.interpreter else "GPU"
        have = ray.cluster_resources().get(kind, 0)
        if have < self.slots:
            self.close()
            raise AkaError(f"--gpus {self.slots}: Ray sees {have:g} {kind}s "
                           f"({settings.cluster or 'this machine'}); ask for at most that many")
        self.idle = [self._spawn() for _ in range(self.slots)]
        try:
            self.devices = self._check_devices(self.idle)  # run.json "workers": what each measures on
        except AkaError:
            self.close()
            raise
        self._index = {a: i for i, a in enumerate(self.idle)}
        self.placements: list[dict[str, Any]] = []  # which worker measured which candidate
        self._busy: dict[Any, tuple[int, Any, Prepared, State]] = {}  # ref -> (n, actor, candidate, state)
        self._tries: dict[int, int] = {}
        self._finished: list[tuple[int, Attempt]] = []
        self._fatal: WorkersLost | None = None
        self.peak = 0  # most candidates measured at once

    def _spawn(self):
        if self._cls is None:
            self._cls = self.ray.remote(EvalWorker).options(**self._resources, max_restarts=0)
        # on a cluster the project is the workers' working directory (shipped by this pool, or by the
        # Ray job this driver runs in)
        root = "" if self.settings.cluster else str(self.op.root)
        return self._cls.remote(self.op.name, root, self.settings.model_dump(), self.factory)

    def _check_devices(self, actors: list) -> list[dict[str, Any]]:
        """Every worker must measure on the device model the run's baseline was measured on: a
        promotion compares only measurements of one model."""
        try:  # a worker waits for a free GPU: on a busy cluster that can be forever
            devices = self.ray.get([a.device.remote() for a in actors], timeout=self.settings.timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            raise AkaError(f"{len(actors)} Ray worker(s) did not start within {self.settings.timeout_s:.0f} s: "
                           f"no free GPU ({self.settings.cluster or 'this machine'} busy?)") from None
        want = self.run.device.name
        for d in devices:
            if d["name"] != want:
                raise AkaError(f"a Ray worker on {d['node']} measures on {d['name']}, this run on {want}: "
                               "use workers of one device model")
        return devices

    def submit(self, prep: Prepared, st: State) -> None:
        if prep.rec.failed_stage:  # refused or not compiled: nothing to measure, decided here
            from aka.run.measure import measure_copy

            self._finished.append((prep.rec.n, measure_copy(prep, self.settings, self.op, None, st, self.run,
                                                           Quiet())))
            return
        actor = self.idle.pop()
        ref = actor.measure.remote(prep, st, self.run, prep.path.read_text(), st.incumbent.read_text())
        self._busy[ref] = (prep.rec.n, actor, prep, st)
        self.peak = max(self.peak, len(self._busy))
        self.placements.append({"candidate": prep.rec.n, "worker": self._index[actor]})
        self.view.update(stage=f"measure on {self.slots - len(self.idle)}/{self.slots} workers",
                         candidate=prep.summary)

    def wait(self) -> list[tuple[int, Attempt]]:
        """What finished; blocks until something has. A loss the pool cannot repair is raised only
        once the records that finished before it have been handed back."""
        ray = self.ray
        while not self._finished and self._busy and self._fatal is None:
            try:
                ready, _ = ray.wait(list(self._busy), num_returns=1)
            except (ray.exceptions.RaySystemError, ConnectionError) as exc:
                self._fatal = WorkersLost(f"the Ray cluster went away ({' '.join(str(exc).split())[:150]})")
                break
            for ref in ready:
                n, actor, prep, st = self._busy.pop(ref)
                try:
                    self._finished.append((n, ray.get(ref)))
                    self.idle.append(actor)
                except ray.exceptions.RayActorError as exc:
                    try:
                        self._lost(n, prep, st, exc)
                    except WorkersLost as fatal:
                        self._fatal = fatal
        if not self._finished and self._fatal is not None:
            raise self._fatal
        out, self._finished = self._finished, []
        return out

    def _lost(self, n: int, prep: Prepared, st: State, exc: BaseException) -> None:
        """A worker died under candidate n: a new worker replaces it and n is measured again, once."""
        why = " ".join(str(exc).split())[:200]
        self._tries[n] = self._tries.get(n, 0) + 1
        again = self._tries[n] == 1
        event = {"candidate": n, "event": "worker lost", "error": why, "requeued": False}
        try:
            fresh = self._spawn()
            self.devices += self._check_devices([fresh])
        except Exception as e:  # the cluster is gone, or no worker of the run's device model starts
            self.events.append(event)
            raise WorkersLost(f"no worker could replace a lost one ({' '.join(str(e).split())[:150]})") from None
        self._index[fresh] = len(self.devices) - 1
        self.idle.append(fresh)
        self.events.append({**event, "requeued": again})
        if not again:
            raise WorkersLost(f"candidate {n} lost its worker twice ({why})")
        self.submit(prep, st)

    def run_fields(self) -> dict[str, Any]:
        """The device each worker measures on, which worker measured which candidate, the workers lost."""
        return {"workers": list(self.devices), "placements": list(self.placements),
                "worker_events": list(self.events)}

    def close(self) -> None:
        for actor in [*getattr(self, "idle", []), *(a for _, a, _, _ in getattr(self, "_busy", {}).values())]:
            try:
                self.ray.kill(actor)
            except Exception:  # already dead
                pass
        if self._own and self.ray.is_initialized():
            self.ray.shutdown()
