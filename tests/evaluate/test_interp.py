"""The bf16 tl.dot shim: without it the interpreter multiplies raw bf16 bit patterns; with it, the
product is right. Runs in fresh workers so each starts with an unpatched Triton."""

from __future__ import annotations

from aka.evaluate.parent.runner import run_task


def test_interpreter_bf16_dot_is_wrong_without_the_shim_and_right_with_it():
    bare = run_task("tests.evaluate.tasks:bf16_dot_unshimmed", {}, timeout=120, interpreter=False)
    shimmed = run_task("tests.evaluate.tasks:interpreter", {}, timeout=120, interpreter=True)
    assert bare.ok and shimmed.ok, (bare.error, shimmed.error)
    assert bare.value["err"] > 1.0  # the bug the shim exists for (integer products of bit patterns)
    assert shimmed.value["shim_ok"] and shimmed.value["err"] < 1e-3
