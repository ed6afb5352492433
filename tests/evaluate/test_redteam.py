"""Every red-team kernel (tests/evaluate/redteam.py) is rejected on CPU, at the stage and for the reason
its class names; the ones written to walk around the static policy are rejected past it too."""

from __future__ import annotations

import re

import pytest
from redteam import ALL, materialise

from aka.contract.ops import get_op
from aka.evaluate.parent.check import check_kernel
from aka.evaluate.parent.evaluator import RealEvaluator
from aka.evaluate.static.policy import check_source
from aka.settings import OptimizeSettings

GATE = [k for k in ALL if k.where == "gate" and not k.gpu_only]
SCREEN = [k for k in ALL if k.where == "screen" and not k.gpu_only]


def _ids(ks):
    return [f"{k.op}-{k.id}" for k in ks]


def _policy_says(k, path) -> None:
    """A kernel run past the policy must still be one the policy refuses, for the stated reason."""
    if k.policy:
        return
    report = check_source(path.read_text(), get_op(k.op).spec)
    assert not report.ok and re.search(k.refused, report.message), report.message


@pytest.mark.parametrize("k", GATE, ids=_ids(GATE))
def test_gate_rejects(k, tmp_path):
    path = materialise(k, tmp_path)
    _policy_says(k, path)
    report = check_kernel(get_op(k.op), path, shapes=k.shapes, rounds=k.rounds, timeout=300, fail_fast=True,
                          interpreter=True, policy=k.policy)
    assert not report.passed, report.summary
    assert report.stage == k.stage and re.search(k.expect, report.reason), (
        report.stage, report.reason, report.stderr_tail[-800:])


@pytest.mark.parametrize("k", SCREEN, ids=_ids(SCREEN))
def test_timing_rejects_what_the_gate_passes(k, tmp_path):
    """Cheats that behave while the gate calls them: the screen's timing checks its own outputs."""
    path = materialise(k, tmp_path)
    _policy_says(k, path)
    op = get_op(k.op)
    ev = RealEvaluator(op, OptimizeSettings(op=k.op, interpreter=True))
    gate, bench = ev.screen(path, ["smoke"], 2, 0, "smoke")
    reason = gate.error or (bench.error if bench is not None else "")
    assert re.search(k.expect, reason), (gate.error, bench)


def test_the_red_team_is_at_least_forty_kernels():
    from pathlib import Path

    files = {p.stem for p in (Path(__file__).parent / "adversarial").glob("*.py")}
    mutants = {f"{k.op}:{k.id}" for k in ALL if k.base}  # files and mutants: 16 + 34 (2026-12-01)
    assert len(files | mutants) >= 40, len(files | mutants)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [k for k in ALL if k.gpu_only and k.where == "gate"],
                         ids=_ids([k for k in ALL if k.gpu_only and k.where == "gate"]))
def test_gpu_only_kernels_fail_the_gate_on_a_gpu(k, tmp_path):
    """Wrong only on a GPU (an ordering race between programs): the gate on the device rejects them."""
    path = materialise(k, tmp_path)
    report = check_kernel(get_op(k.op), path, shapes=k.shapes, rounds=k.rounds, timeout=300, interpreter=False)
    assert not report.passed and re.search(k.expect, report.reason), report.summary


@pytest.mark.gpu
@pytest.mark.parametrize("k", [k for k in ALL if k.gpu_only and k.where == "screen"],
                         ids=_ids([k for k in ALL if k.gpu_only and k.where == "screen"]))
def test_gpu_only_cheats_are_rejected(k, tmp_path):
    path = materialise(k, tmp_path)
    _policy_says(k, path)
    ev = RealEvaluator(get_op(k.op), OptimizeSettings(op=k.op, interpreter=False))
    gate, bench = ev.screen(path, ["smoke"], 2, 0, "D1-q1,D4-q1" if k.op == "fa4_decode" else "full")
    reason = gate.error or (bench.error if bench is not None else "")
    assert re.search(k.expect, reason), (gate.error, bench)


@pytest.mark.gpu
def test_the_gpu_gate_lists_the_device_kernels_a_call_ran():
    op = get_op("fa4_decode")
    report = check_kernel(op, op.path("baseline"), shapes="S1", rounds=2, timeout=300, interpreter=False)
    assert report.passed, report.summary
    rec = report.results[0].rounds[0].launches
    assert rec is not None and rec.triton.get("_fa4_decode_kernel", 0) >= 1
    assert any("_fa4_decode_kernel" in name for name in rec.device_kernels) or rec.profiler, rec


@pytest.mark.gpu
def test_torch_matmul_past_the_policy_is_rejected_on_gpu(tmp_path):
    path = tmp_path / "mm.py"
    path.write_text("import torch\n\n\ndef fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):\n"
                    "    x = torch.matmul(q.float().flatten(1), q.float().flatten(1).t())\n"
                    "    return torch.zeros_like(q) + x.sum() * 0\n")
    op = get_op("fa4_decode")
    report = check_kernel(op, path, shapes="S1", rounds=2, timeout=300, interpreter=False, policy=False)
    assert report.stage == "check" and "computed with torch outside its kernels" in report.reason, report.reason
