"""Shared test set-up: the CPU suite runs Triton kernels in the interpreter.

TRITON_INTERPRET must be set before any module decorates a kernel, so it is set here, at
collection time, unless a CUDA device is present (GPU tests run on the device machine).
"""

import os

import pytest

if os.environ.get("AKA_TEST_ON_GPU") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from aka.evaluate.interp import install_bf16_dot_shim

    install_bf16_dot_shim()


@pytest.fixture(autouse=True)
def _no_api_keys(monkeypatch):
    # Tests never talk to a real provider: strip keys a developer may have exported.
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
