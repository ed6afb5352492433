"""--lang cuda: the policy admits load_inline only for a CUDA run; without a GPU a CUDA candidate is compiled
with nvcc (errors feed the repair loop) and is never gated, so never promoted."""

from __future__ import annotations

import shutil

import pytest
from answers_text import CUDA_BROKEN, CUDA_CODE, PLAN, fenced
from fake_servers import user_text
from llm_helpers import TOY, backend, context

from aka.config import LLMSettings
from aka.contract.ops import get_op
from aka.evaluate.parent.evaluator import RealEvaluator
from aka.records import Plan
from aka.settings import OptimizeSettings

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


def evaluator(lang):
    op = get_op("scale_add", TOY)
    return op, RealEvaluator(op, OptimizeSettings(op="scale_add", interpreter=True, llm=LLMSettings(lang=lang)))


def test_policy_admits_load_inline_only_in_a_cuda_run():
    _, ev = evaluator("cuda")
    assert ev.check(CUDA_CODE).ok
    _, ev = evaluator("triton")
    chk = ev.check(CUDA_CODE)
    assert not chk.ok and "torch.utils.cpp_extension" in chk.error


@needs_nvcc
def test_without_a_gpu_nvcc_reports_the_error_and_the_gate_refuses(tmp_path):
    _, ev = evaluator("cuda")
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text(CUDA_BROKEN)
    good.write_text(CUDA_CODE)
    out = ev.compile(bad)
    assert not out.ok and 'expected a ";"' in out.error and out.detail == {"nvcc_only": True}
    assert ev.compile(good).ok
    g, b = ev.screen(good, ["smoke"], 2, 0, "smoke")
    assert b is None and "cannot be gated without a GPU" in g.error


@needs_nvcc
def test_cuda_compile_error_goes_through_the_repair_loop(server, tmp_path, monkeypatch):
    op, ev = evaluator("cuda")
    (tmp_path / "candidates").mkdir()

    def verify(source):
        path = tmp_path / "candidates" / "draft.py"
        path.write_text(source)
        chk = ev.check(source)
        if not chk.ok:
            return "check", chk.error
        comp = ev.compile(path)
        return ("", "") if comp.ok else ("compile", comp.error)

    server.add(fenced(CUDA_BROKEN), fenced(CUDA_CODE))
    be = backend(server.kind, server, op, monkeypatch, lang="cuda")
    src, _ = be.candidate(Plan(**PLAN), context(op, tmp_path, verify=verify))
    assert src == CUDA_CODE
    assert 'expected a ";"' in user_text(server.requests[1]["messages"][-1])
    assert "CUDA_SRC" in user_text(server.requests[0]["messages"][-1])  # the CUDA codegen template


@pytest.mark.gpu
def test_on_a_gpu_the_cuda_candidate_builds_and_passes_the_gate(tmp_path):
    """Device machine only: load_inline builds the extension in the worker, the gate runs it."""
    op = get_op("scale_add", TOY)
    ev = RealEvaluator(op, OptimizeSettings(op="scale_add", interpreter=False, llm=LLMSettings(lang="cuda")))
    path = tmp_path / "cand.py"
    path.write_text(CUDA_CODE)
    assert ev.check(CUDA_CODE).ok
    comp = ev.compile(path)
    assert comp.ok and "nvcc_only" not in comp.detail, comp.error
    g, b = ev.screen(path, ["smoke", "edge"], 3, 0, "full")
    assert not g.error and g.passed and all(all(r) for r in g.passed.values()), g.error
    assert b is not None and b.timing == "gpu" and set(b.times_us) == {"F1"}, b
