"""Candidates on Ray workers (issue 22), on CPU: a local Ray instance whose two CPU workers stand in
for GPUs. A real interpreter campaign with two candidates in flight, and a worker killed in the
middle of a candidate, which is measured again on a fresh worker and never charged for it."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from fakes import FakeEvaluator, slow_fake, source

from aka.agent.llm.base import get_backend
from aka.agent.llm.scripted import ScriptedBackend
from aka.contract.ops import get_op
from aka.evaluate.parent.evaluator import RealEvaluator
from aka.records import Attempt
from aka.run.loop import run_loop
from aka.run.prefetch import Quiet
from aka.run.raypool import RayPool
from aka.run.setup import prepare_run
from aka.settings import Budget, OptimizeSettings

SUPPORT = Path(__file__).resolve().parents[1] / "support"

pytestmark = pytest.mark.slow


# ray is the `ray` extra, not a dev dependency (~240 MB): without it the tests that need it skip
NO_RAY = "ray is not installed (pip install -e '.[ray]'; CI's .ci/run installs it)"


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray", reason=NO_RAY)

    path = os.pathsep.join(p for p in (str(SUPPORT), os.environ.get("PYTHONPATH", "")) if p)
    # two CPUs: the two workers; the fakes module importable in them (the kill test's evaluator)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield ray
    ray.shutdown()


def _toy(tmp: Path) -> Path:
    """The toy op with a search space for the offline backend: seven block sizes."""
    root = tmp / "toy"
    shutil.copytree(SUPPORT / "toyop", root)
    base = root / "kernels/scale_add/baseline.py"
    space = 'SPACE = {"BLOCK": [16, 32, 64, 128, 256, 512, 1024]}'
    base.write_text(base.read_text().replace('CONFIG = {"BLOCK": 128}', 'CONFIG = {"BLOCK": 128}\n' + space))
    return root


def test_interpreter_campaign_with_two_candidates_in_flight(tmp_path, ray_local):
    root = _toy(tmp_path)
    op = get_op("scale_add", root)
    settings = OptimizeSettings(op="scale_add", budget=Budget(max_candidates=6), interpreter=True, gpus=2,
                                commit=False, cpu_gate_sets=["smoke"], cpu_bench_shapes="smoke", prepare_ahead=1)
    ev = RealEvaluator(op, settings)
    store = prepare_run(root / "runs", settings, op, ev)
    pool = RayPool(settings, op, store.read_run(), Quiet())
    assert len({d["pid"] for d in pool.devices}) == 2 and {d["name"] for d in pool.devices} == {ev.device()["name"]}
    summary = run_loop(store, settings, op, get_backend("offline"), ev, pool=pool)
    att = store.attempts()
    assert summary["attempts"] == 6 and [a.n for a in att] == list(range(6))
    assert pool.peak == 2  # two candidates measured at once
    measured = [a for a in att if not a.failed_stage]
    assert len(measured) >= 5, [(a.n, a.failed_stage) for a in att]
    assert all(a.bench.timing == "interpreter" and a.gate.passed for a in measured)
    assert {a.decision.reason for a in measured} == {"not promoted: interpreter timings cannot promote"}
    run = json.loads((store.path / "run.json").read_text())
    assert len(run["workers"]) == 2 and {p["worker"] for p in run["placements"]} == {0, 1}
    assert sorted(p["candidate"] for p in run["placements"]) == [a.n for a in measured]
    # the log a local run writes: every line is a whole Attempt, with the same fields
    for line in (store.path / "attempts.jsonl").read_text().splitlines():
        assert set(json.loads(line)) == set(Attempt.model_fields)


def test_a_killed_worker_requeues_its_candidate(project, op, ray_local):
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=4), interpreter=True, gpus=2,
                                commit=False, prepare_ahead=1)
    ev = FakeEvaluator(op, timing="interpreter")
    store = prepare_run(project / "runs", settings, op, ev)
    pool = RayPool(settings, op, store.read_run(), Quiet(), factory=slow_fake)
    steps = [{"source": source(1.0 + i / 10, tag=str(i))} for i in range(4)]
    out: dict = {}
    loop = threading.Thread(target=lambda: out.update(summary=run_loop(store, settings, op, ScriptedBackend(steps),
                                                                        ev, pool=pool)))
    loop.start()
    deadline = time.time() + 60
    while not pool._busy and time.time() < deadline:
        time.sleep(0.05)
    n, actor, _, _ = next(iter(pool._busy.values()))
    time.sleep(0.5)  # inside its 2 s screen
    ray_local.kill(actor)
    loop.join(timeout=120)
    assert not loop.is_alive() and out["summary"]["attempts"] == 4
    att = store.attempts()
    assert [a.n for a in att] == [0, 1, 2, 3]
    assert pool.events == [{"candidate": n, "event": "worker lost", "error": pool.events[0]["error"],
                            "requeued": True}]
    assert "died" in pool.events[0]["error"].lower() or "actor" in pool.events[0]["error"].lower()
    # measured in full on the fresh worker, recorded like the others: the loss is not the candidate's
    assert att[n].failed_stage == "" and att[n].gate.passed and att[n].bench.timing == "interpreter"
    run = json.loads((store.path / "run.json").read_text())
    assert run["worker_events"] == pool.events and len(run["workers"]) == 3  # the replacement's device too
    assert [p["candidate"] for p in run["placements"]].count(n) == 2
    from aka.cli.runs import workers_line

    assert workers_line(store.read_run()) == (f"measured on 3 Ray workers (cpu (fake); 1 node); 1 worker(s) lost, "
                                 f"candidates {n} (measured again)")


def test_without_enough_workers_the_pool_says_how_many_there_are(project, op, ray_local):
    settings = OptimizeSettings(op="gdn_prefill", interpreter=True, gpus=3, commit=False)
    store = prepare_run(project / "runs", settings, op, FakeEvaluator(op, timing="interpreter"))
    with pytest.raises(Exception, match=r"--gpus 3: Ray sees 2 CPUs"):
        RayPool(settings, op, store.read_run(), Quiet(), factory=slow_fake)


def test_a_lost_cluster_stops_the_run_resumable(project, op, ray_local, monkeypatch):
    # the connection to Ray fails while candidates are in flight: what finished is recorded, the run
    # stops with the reason, and nothing is charged to the candidates that were out
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=4), interpreter=True, gpus=2,
                                commit=False, prepare_ahead=1)
    ev = FakeEvaluator(op, timing="interpreter")
    store = prepare_run(project / "runs", settings, op, ev)
    pool = RayPool(settings, op, store.read_run(), Quiet(), factory=slow_fake)
    real_wait, calls = pool.ray.wait, []

    def flaky_wait(refs, num_returns=1):
        calls.append(1)
        if len(calls) > 1:
            raise ConnectionError("GCS at 10.0.0.1:6379 unreachable")
        return real_wait(refs, num_returns=num_returns)

    monkeypatch.setattr(pool.ray, "wait", flaky_wait)
    steps = [{"source": source(1.0 + i / 10, tag=str(i))} for i in range(4)]
    summary = run_loop(store, settings, op, ScriptedBackend(steps), ev, pool=pool)
    assert summary["workers_lost"].startswith("the Ray cluster went away (GCS at 10.0.0.1:6379 unreachable")
    # candidate 0 is recorded when it finished first (1 waits for 0: the log stays in order)
    assert summary["attempts"] in (0, 1) and store.read_run().status == "stopped"
    assert [a.n for a in store.attempts()] == list(range(summary["attempts"]))


def test_resume_moves_a_run_between_ray_and_this_machine():
    from aka.cli.optimize import resumed_settings

    stored = OptimizeSettings(op="gdn_prefill", gpus=8, cluster="ray://10.0.0.1:10001")
    here = resumed_settings(stored, None, None, gpus=1)
    assert here.gpus == 1 and here.cluster is None
    back = resumed_settings(here, 40, None, gpus=4, cluster="auto")
    assert back.gpus == 4 and back.cluster == "auto" and back.budget.max_candidates == 40
    assert resumed_settings(stored, None, None) == stored


def test_a_cluster_gets_the_project_and_this_aka_and_an_unreachable_one_is_one_line(project, op, monkeypatch):
    ray = pytest.importorskip("ray", reason=NO_RAY)

    import aka
    from aka.errors import AkaError

    seen = {}

    def fake_init(**kw):
        seen.update(kw)
        raise ConnectionError("Could not connect to ray://10.0.0.9:10001\n(timed out)")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    settings = OptimizeSettings(op="gdn_prefill", gpus=4, cluster="ray://10.0.0.9:10001")
    with pytest.raises(AkaError, match=r"^cannot start or reach Ray \(ray://10\.0\.0\.9:10001\): Could not connect"):
        RayPool(settings, op, {"device": {"name": "NVIDIA H200"}}, Quiet())
    env = seen["runtime_env"]
    assert seen["address"] == "ray://10.0.0.9:10001" and env["working_dir"] == str(op.root)
    assert env["py_modules"] == [str(Path(aka.__file__).parent)] and "runs/" in env["excludes"]


def test_a_dead_workers_folder_is_swept(tmp_path, monkeypatch):
    import os as _os

    from aka.evaluate.parent import runner
    from aka.run.raypool import worker_folder

    d = worker_folder(str(tmp_path))
    assert d.parent == tmp_path and d.name.startswith(f"aka-worker-{_os.getpid()}-ray-")
    assert runner.sweep_stale_folders(str(tmp_path)) == [] and d.exists()  # its process still runs
    monkeypatch.setattr(runner, "_alive", lambda pid: False)  # the Ray worker's process is gone
    assert runner.sweep_stale_folders(str(tmp_path)) == [d.name] and not d.exists()
