"""Shared test set-up: the CPU suite runs Triton kernels in the interpreter.

TRITON_INTERPRET must be set before any module decorates a kernel, so it is set here, at
collection time, unless a CUDA device is present (GPU tests run on the device machine).

tests/ mirrors aka/ (tests/<stage>/ for aka/<stage>/, tests/test_*.py for the modules directly under
aka/ and the architecture rules); what several stages' tests share lives in tests/support/ (a fake
project and evaluator, fake LLM servers, a toy op), importable from every test.
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "support"))

if os.environ.get("AKA_TEST_ON_GPU") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from aka.evaluate.host.interp import install_bf16_dot_shim

    install_bf16_dot_shim()

# A baseline written as stage files (gdn_prefill) is a file only once aka renders it, which any aka command
# does first; tests read kernels/<op>/baseline.py directly too, so a fresh clone renders them here.
from aka.contract.ops import all_ops  # noqa: E402

all_ops(Path(__file__).resolve().parents[1])


@pytest.fixture(autouse=True)
def _no_api_keys(monkeypatch):
    # Tests never talk to a real provider: strip keys a developer may have exported.
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def project(tmp_path):
    """A fake project in a temporary git repository (tests/support/fakes.py)."""
    from fakes import make_project

    return make_project(tmp_path)


@pytest.fixture
def op(project):
    from aka.contract.ops import get_op

    return get_op("gdn_prefill", project)
