"""A candidate's Triton specialisations compiled once each, outside the GPU lock, before its compile call
(aka.evaluate.precompile; issue 36: gdn_prefill's compiles held the GPU lock and repeated each other)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aka.contract.ops import get_op
from aka.contract.shapes import every_case
from aka.evaluate.parent import door, evaluator
from aka.evaluate.parent.runner import run_task
from aka.evaluate.precompile import shares
from aka.settings import OptimizeSettings

TOY = Path(__file__).parents[1] / "support" / "toyop"


def _spec(name: str, i: int) -> dict[str, str]:
    return {"module": "m", "name": name, "data": f"{name}-{i}"}


def test_each_specialisation_goes_to_one_worker_and_every_worker_gets_a_mix():
    specs = [_spec("prep", i) for i in range(4)] + [_spec("fwd", i) for i in range(2)]
    parts = shares(specs, 3)
    assert sorted(s["data"] for p in parts for s in p) == sorted(s["data"] for s in specs)
    assert [len(p) for p in parts] == [2, 2, 2]
    assert all({s["name"] for s in p} == {"fwd", "prep"} for p in parts[:2])
    assert shares(specs[:2], 8) == [[specs[0]], [specs[1]]]  # never an empty worker


def _gpu_evaluator(monkeypatch, answers):
    op = get_op("fa4_decode")
    ev = evaluator.RealEvaluator(op, OptimizeSettings(op=op.name, interpreter=False, spare_workers=0,
                                                      compile_split=2))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    calls = []

    def call(task, payload, *a):
        assert task == "aka.evaluate.checker.tasks:compile_worker"
        calls.append(payload)
        return answers(payload)

    monkeypatch.setattr(door, "call", call)
    return op, ev, calls


def test_one_call_compiles_every_specialisation_on_forks_then_runs_every_case(monkeypatch):
    ahead = {"specs": 57, "record_s": 0.4, "compiled": 57, "workers": 2, "seconds": 9.0}
    op, ev, calls = _gpu_evaluator(monkeypatch, lambda p: (True, {"seconds": 11.0, "precompile": ahead}, ""))
    out = ev.compile(op.path("baseline"))
    assert out.ok and out.detail["precompile"] == ahead and out.detail["workers"] == 1
    assert out.detail["call_s"] >= 0 and out.detail["stats_s"] == 0.0
    (sent,) = calls
    assert sent.precompile == 2 and sent.cases == sorted(every_case(op))


def test_a_tainted_record_or_a_dead_worker_is_never_the_candidates(monkeypatch):
    tainted = {"specs": 3, "record_s": 0.2, "tainted": ["D1: RuntimeError: x"]}
    for first in ((True, {"seconds": 1.0, "precompile": tainted}, ""),
                  (False, None, "crash: worker died of SIGSEGV"), (False, None, "timeout: no result within 300 s")):
        def answers(p, first=first):
            return first if p.precompile is not None else (True, {"seconds": 0.5, "cases": len(p.cases)}, "")

        op, ev, calls = _gpu_evaluator(monkeypatch, answers)
        out = ev.compile(op.path("baseline"))
        assert out.ok and out.error == "" and "precompile" not in out.detail, first
        assert [p.precompile is not None for p in calls] == [True, False, False]  # then the cases split as before
        assert sorted(c for p in calls[1:] for c in p.cases) == sorted(every_case(op))


def test_the_candidates_own_compile_error_is_the_verdict_at_once(monkeypatch):
    op, ev, calls = _gpu_evaluator(monkeypatch, lambda p: (False, None, "compile: CompilationError: at 3:4"))
    out = ev.compile(op.path("baseline"))
    assert not out.ok and out.error == "compile: CompilationError: at 3:4" and len(calls) == 1


def test_the_interpreter_records_nothing(monkeypatch):
    op = get_op("fa4_decode")
    ev = evaluator.RealEvaluator(op, OptimizeSettings(op=op.name, interpreter=True))
    calls = []
    monkeypatch.setattr(door, "call", lambda task, p, *a: (calls.append(p), (True, {"seconds": 0.1}, ""))[1])
    assert ev.compile(op.path("baseline")).ok
    assert len(calls) == 1 and calls[0].precompile is None


@pytest.mark.gpu
def test_after_the_record_and_the_forks_the_launches_compile_nothing(tmp_path, monkeypatch):
    """On the device: the specialisations recorded with every launch skipped, compiled in forked children,
    are the ones the launches then look up (no kernel binary added by them)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    op = get_op("scale_add", TOY)
    payload = {"op": op.name, "root": str(TOY), "path": str(op.path("baseline")), "force_cpu": False,
               "precompile": 2}
    res = run_task("aka.evaluate.checker.tasks:compile_worker", payload, timeout=300, interpreter=False)
    assert res.ok, res.error
    pre = res.value["precompile"]
    assert pre["specs"] >= 1 and pre["compiled"] == pre["specs"] and "failed" not in pre, pre
    assert len(list((tmp_path / "cache").rglob("*.cubin"))) == pre["specs"]


def test_forked_children_compile_their_share_into_the_disk_cache(tmp_path):
    """The fork step on this machine (Triton compiles for sm_90 without a GPU): each child compiles its
    share, one that fails says which and why, and nothing of theirs is lost."""
    path = TOY / "kernels" / "scale_add" / "baseline.py"
    res = run_task("tests.evaluate.tasks:forked_compile", {"path": str(path), "cache": str(tmp_path)}, timeout=300,
                   interpreter=False)
    assert res.ok, res.error
    assert res.value["compiled"] == 2 and res.value["workers"] == 2 and res.value["cubins"] == 2
    (failed,) = res.value["failed"]
    assert failed.startswith("broken: JSONDecodeError")


def test_a_compile_alone_takes_every_core_and_several_share_half(monkeypatch):
    op, ev, calls = _gpu_evaluator(monkeypatch, lambda p: (True, {"seconds": 1.0}, ""))
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    ev.compile(op.path("baseline"), ["D1", "D2"])  # alone: the set-up's incumbent
    ev._compiling = 1  # another compile running
    ev.compile(op.path("baseline"))
    assert [p.precompile for p in calls] == [16, 4]
    assert calls[0].cases == ["D1", "D2"] and calls[1].cases == sorted(every_case(op))


def test_timing_holds_the_gpu_exclusively_against_compile_calls(monkeypatch, tmp_path):
    import fcntl

    op, ev, calls = _gpu_evaluator(monkeypatch, lambda p: (True, {}, ""))
    ev.gpu_lock = tmp_path / "gpu.lock"
    held = []

    def timing(task, payload, *a):  # a compile call's shared lock must not be free while timing runs
        with open(ev.gpu_lock, "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
                held.append(False)
            except BlockingIOError:
                held.append(True)
        return False, None, "timeout: fake"

    monkeypatch.setattr(door, "call", timing)
    ev.bench(op.path("baseline"), "smoke")
    assert held == [True]


def test_a_compile_for_timing_only_reads_no_statistics(monkeypatch):
    op, ev, calls = _gpu_evaluator(monkeypatch, lambda p: (True, {"seconds": 1.0}, ""))
    ev.compile(op.path("baseline"), ["D1"], stats=False)
    assert calls[0].stats is False
    op = get_op("scale_add", TOY)  # the worker itself, in the interpreter
    for stats in (True, False):
        payload = {"op": op.name, "root": str(TOY), "path": str(op.path("baseline")), "force_cpu": True,
                   "stats": stats}
        res = run_task("aka.evaluate.checker.tasks:compile_worker", payload, timeout=120, interpreter=True)
        assert res.ok, res.error
        assert ("compile_stats" in res.value) is stats
