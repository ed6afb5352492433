"""`aka optimize` end to end through the real CLI, the real SDK clients and a local fake server, on CPU.

The toy op keeps the interpreter stages to seconds. Attempt 0: a malformed plan then a good one,
then code that fails to compile (a Triton function that does not exist) and its fix, which the
gate passes (nothing is promoted on CPU). Attempt 1: prose instead of code, which fails that
attempt with its reason while the run goes on to its end.
"""

from __future__ import annotations

import json
import re

import pytest
from answers_text import BAD_PLAN, COMPILE_ERROR_CODE, GOOD_CODE, GOOD_PLAN, PROSE, fenced
from fake_servers import FakeServer, dead_url, user_text
from llm_helpers import aka, run_dir

from aka.records import read_attempts


class Model:
    """Answers by what is asked (the loop plans one candidate ahead, so order alone is not enough)."""

    def __init__(self):
        self.codegens = 0

    def __call__(self, body):
        msgs = [m for m in body["messages"] if m["role"] != "system"]
        first, last = user_text(msgs[0]), user_text(msgs[-1])
        if "Plan the next candidate" in first:
            attempt = int(re.search(r"attempt (\d+) of this run", first).group(1))
            return BAD_PLAN if attempt == 0 and len(msgs) == 1 else GOOD_PLAN
        if len(msgs) > 1:  # a repair request
            assert "fused_twice_plus" in last, last
            return fenced(GOOD_CODE)
        self.codegens += 1
        return fenced(COMPILE_ERROR_CODE) if self.codegens == 1 else PROSE


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_optimize_end_to_end_against_a_local_server(kind, toy_project):
    with FakeServer(kind, responder=Model()) as server:
        r = aka(toy_project, "optimize", "scale_add", "--backend", kind, "--base-url", server.url, "--budget", "2",
                "--repairs", "1", env_extra={f"{kind.upper()}_API_KEY": "test-key"})
    assert r.returncode == 0, r.stdout + r.stderr
    d = run_dir(toy_project, r.stdout)
    a0, a1 = read_attempts(d)
    assert a0.failed_stage == "" and a0.decision.reason == "not promoted: interpreter timings cannot promote"
    assert a0.config == {} and a0.plan.param_ranges == {"BLOCK": [128, 256, 512]}
    assert (d / "candidates" / "0.py").read_text() == GOOD_CODE  # the repaired module was measured
    assert a1.failed_stage == "codegen" and "prose only" in a1.decision.reason
    for a in (a0, a1):  # token use per attempt, plan and codegen calls included
        assert a.usage.input_tokens > 0 and a.usage.output_tokens > 0 and a.usage.cached_tokens > 0
        assert a.tokens == a.usage.input_tokens + a.usage.output_tokens
    stages = [json.loads(p.read_text())["stage"] for p in sorted((d / "llm").glob("*.json"))]
    assert stages == ["plan", "plan-retry", "codegen", "repair", "plan", "codegen"]
    total_in = a0.usage.input_tokens + a1.usage.input_tokens
    assert f"{a0.tokens + a1.tokens} tokens ({total_in:,} in," in r.stdout  # the summary
    assert json.loads((d / "run.json").read_text())["settings"]["llm"]["base_url"] == server.url
    if kind == "openai":  # replay the run without any server: same candidates, same outcomes
        rp = aka(toy_project, "optimize", "scale_add", "--backend", "replay", "--from", d.name, "--budget", "2")
        assert rp.returncode == 0, rp.stdout + rp.stderr
        b0, b1 = read_attempts(run_dir(toy_project, rp.stdout))
        assert (b0.code_hash, b1.failed_stage) == (a0.code_hash, "codegen")
        assert b0.usage == a0.usage


def test_missing_key_fails_fast_naming_the_variable(toy_project):
    r = aka(toy_project, "optimize", "scale_add", "--backend", "anthropic", timeout=60)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0
    assert "ANTHROPIC_API_KEY" in r.stderr and not (toy_project / "runs").exists()  # before any work


def test_a_dead_endpoint_fails_before_the_baseline_is_measured(toy_project):
    url = dead_url("openai")
    r = aka(toy_project, "optimize", "scale_add", "--backend", "openai", "--base-url", url, "--model", "m",
            timeout=60)
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0, r.stdout + r.stderr
    assert url in r.stderr and "--base-url" in r.stderr and "not reachable" in r.stderr
    assert not (toy_project / "runs").exists()  # no baseline measured, no run to resume
