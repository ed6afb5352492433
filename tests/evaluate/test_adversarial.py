"""Red-team suite: every candidate in adversarial/ must be rejected, at the right stage, for the
right reason; every baseline must pass. CPU cases run in CI (Triton interpreter); the GPU-only
ones (side stream, device assert, illegal address, 200 GB) run on the device via scripts/device/gpu_tests.sh.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from aka.contract.ops import get_op, op_names
from aka.evaluate.checker.gate import WARM_CALLS
from aka.evaluate.parent.check import check_kernel
from aka.evaluate.parent.runner import run_task
from aka.evaluate.wire import GatePayload

HERE = Path(__file__).parent / "adversarial"

# file, op, stage, reason pattern (searched in the report's reason)
CPU_CASES = [
    ("zeros.py", "gdn_prefill", "check", r"^S1: round 0: o: all zeros$"),
    ("returns_input.py", "fa4_decode", "check", r"o: returns input 'q' \(shares its storage\)"),
    ("first_sequence.py", "fa4_decode", "check", r"^S1: round 0: o: (NaN/Inf in|rel L2|max element)"),
    ("multiple_of_64.py", "fa4_decode", "check", r"^S1: round 0: o: (rel L2|max element)"),
    ("cached.py", "fa4_decode", "check",
     r"^S1: round 1 \(softmax_scale=[0-9.]+\): o: cached result \(identical output for different inputs\)"),
    ("half_output.py", "fa4_decode", "check", r"^S1: round 0: o: (NaN/Inf in|rel L2)"),
    ("low_precision.py", "fa4_decode", "check", r"^S1: round 0: o: (rel L2|max element|precision drop)"),
    ("smoke_shapes.py", "fa4_decode", "check", r"^E[45]: round 0: o: (rel L2|max element)"),
    ("imports_reference.py", "gdn_prefill", "policy", r"import from 'kernels\.gdn_prefill\.reference'"),
    ("torch_attention.py", "fa4_prefill", "policy", r"torch\.nn\.functional\.scaled_dot_product_attention|\.tril"),
    ("side_stream.py", "fa4_decode", "policy", r"'torch\.cuda\.Stream' is not allowed"),
    ("segfault.py", "fa4_decode", "crash", r"SIGSEGV"),
]

GPU_CASES = [
    ("segfault.py", "fa4_decode", "device-fault", r"illegal (memory access|address)|unspecified launch failure"),
    ("device_assert.py", "fa4_decode", "device-fault", r"device-side assert"),
    ("huge_alloc.py", "fa4_decode", "oom", r"out of memory"),
]


def _check(name: str, op: str, **kw):
    return check_kernel(get_op(op), HERE / name, shapes="smoke,edge", rounds=2, timeout=300, fail_fast=True, **kw)


@pytest.mark.parametrize("name,op,stage,pattern", CPU_CASES, ids=[c[0][:-3] for c in CPU_CASES])
def test_rejected_on_cpu(name, op, stage, pattern):
    report = _check(name, op, interpreter=True)
    assert not report.passed
    assert report.stage == stage and re.search(pattern, report.reason), (
        report.stage, report.reason, report.stderr_tail[-800:])
    if name == "smoke_shapes.py":  # the smoke shapes it was tuned to pass; the edge shapes catch it
        assert [r.id for r in report.results if r.passed][:2] == ["S1", "S2"]


def test_small_precision_drop_inside_the_tolerance_is_caught():
    report = check_kernel(get_op("fa4_decode"), HERE / "bf16_accumulate.py", shapes="smoke,edge", rounds=2,
                          timeout=300, fail_fast=True, interpreter=True)
    assert not report.passed and "precision drop" in report.reason


def test_hung_candidate_is_killed_and_the_run_goes_on():
    t0 = time.monotonic()
    hung = check_kernel(get_op("fa4_decode"), HERE / "sleeps_forever.py", shapes="E1", timeout=12, interpreter=True)
    assert hung.stage == "timeout" and "no result within 12 s" in hung.reason
    assert time.monotonic() - t0 < 25
    after = _check("returns_input.py", "fa4_decode", interpreter=True)
    assert after.stage == "check" and "returns input 'q'" in after.reason


@pytest.mark.parametrize("op", op_names())  # every contract in workloads/
def test_baseline_passes_on_cpu(op):
    o = get_op(op)
    report = check_kernel(o, o.path("baseline"), shapes="smoke,edge", rounds=2, timeout=600, interpreter=True)
    assert report.passed, report.summary
    assert {r.id for r in report.results} == {c.id for s in ("smoke", "edge") for c in o.cases(s)}
    assert all(len(r.rounds) == 2 + WARM_CALLS for r in report.results)  # two rounds, then a warm call


# ---------------------------------------------------------------------------------------------
# GPU only


@pytest.mark.gpu
@pytest.mark.parametrize("name,op,stage,pattern", GPU_CASES, ids=[c[0][:-3] for c in GPU_CASES])
def test_rejected_on_gpu(name, op, stage, pattern):
    report = _check(name, op, interpreter=False)
    assert not report.passed
    assert report.stage == stage and re.search(pattern, report.reason + report.stderr_tail, re.I), (
        report.stage, report.reason, report.stderr_tail[-800:])


@pytest.mark.gpu
@pytest.mark.parametrize("name,op,stage,pattern", [c for c in CPU_CASES if c[2] != "crash"],
                         ids=[c[0][:-3] for c in CPU_CASES if c[2] != "crash"])
def test_cpu_cases_rejected_on_gpu(name, op, stage, pattern):
    report = _check(name, op, interpreter=False)
    assert report.stage == stage and re.search(pattern, report.reason), (report.stage, report.reason)


@pytest.mark.gpu
def test_side_stream_caught_by_the_gate_itself():
    """Past the policy (run the worker directly): the snapshot on the caller's stream differs."""
    op = get_op("fa4_decode")
    payload = GatePayload(op=op.name, root=str(op.root), kernel=str(HERE / "side_stream.py"), shapes="S1", rounds=2)
    res = run_task("aka.evaluate.checker.gate:gate_worker", payload.model_dump(), timeout=300, interpreter=False)
    assert res.ok, res.error
    assert not res.value["passed"]
    assert "changed after the device was synchronised (work left on another stream)" in res.value["reason"]


@pytest.mark.gpu
@pytest.mark.parametrize("op", op_names())  # every contract in workloads/
def test_baseline_passes_on_gpu(op):
    o = get_op(op)
    report = check_kernel(o, o.path("baseline"), shapes="smoke,edge", rounds=3, timeout=300, interpreter=False)
    assert report.passed, report.summary
    assert not report.interpreter and len(report.results) == len(o.cases("smoke")) + len(o.cases("edge"))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("op", op_names())  # every contract in workloads/
def test_baseline_passes_on_gpu_full_set(op):
    o = get_op(op)
    report = check_kernel(o, o.path("baseline"), shapes="full", rounds=3, timeout=590, interpreter=False)
    assert report.passed, report.summary
    assert len(report.results) == len(o.cases("full"))
