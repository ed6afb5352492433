"""The real loop with an LLM backend (real SDK client, fake server) and the loop tests' fake evaluator:
unusable answers fail their attempt and the run goes on; --max-tokens stops the run cleanly."""

from __future__ import annotations

import subprocess
import sys

import pytest
from answers_text import GOOD_PLAN, PROSE, fenced
from fakes import FakeEvaluator, make_project, source  # noqa: E402

from aka.agent.llm.base import get_backend  # noqa: E402
from aka.config import LLMConfig, LLMSettings  # noqa: E402
from aka.contract.ops import get_op  # noqa: E402
from aka.run.loop import run_loop  # noqa: E402
from aka.run.setup import prepare_run  # noqa: E402
from aka.settings import Budget, OptimizeSettings  # noqa: E402


def run(kind, server, tmp_path, monkeypatch, budget, max_tokens=None):
    project = make_project(tmp_path)
    op = get_op("gdn_prefill", project)
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "test-key")
    llm = LLMSettings(base_url=server.url, sweep=0)
    settings = OptimizeSettings(op="gdn_prefill", backend=kind, llm=llm, prepare_ahead=False,
                                budget=Budget(max_candidates=budget, max_tokens=max_tokens))
    be = get_backend(kind, op=op, llm=llm, config=LLMConfig(max_retries=0, timeout_s=10))
    ev = FakeEvaluator(op, timing="gpu")
    store = prepare_run(project / "runs", settings, op, ev)
    return store, run_loop(store, settings, op, be, ev)


def test_unusable_answers_fail_their_attempt_and_the_run_goes_on(kind, server, tmp_path, monkeypatch):
    server.add(GOOD_PLAN, PROSE, GOOD_PLAN, "", GOOD_PLAN, fenced(source(1.3, "llm")))
    store, summary = run(kind, server, tmp_path, monkeypatch, 3)
    att = store.attempts()
    assert [a.failed_stage for a in att] == ["codegen", "codegen", ""]
    assert "prose only" in att[0].decision.reason and "answer is empty" in att[1].decision.reason
    assert att[2].decision.verdict == "promoted"  # the run went on and the good candidate won
    assert summary["tokens"] == sum(a.tokens for a in att) > 0


def test_max_tokens_stops_the_run_cleanly(kind, server, tmp_path, monkeypatch):
    server.add(GOOD_PLAN, fenced(source(1.3, "a")), GOOD_PLAN, fenced(source(1.4, "b")))
    store, summary = run(kind, server, tmp_path, monkeypatch, 5, max_tokens=100)
    assert len(store.attempts()) == 1 and summary["stop_reason"] == "token limit of 100 reached"
    assert len(server.requests) == 2  # no call after the limit


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_without_the_sdk_one_line_names_the_extra(provider):
    code = (f"import sys; sys.modules[{provider!r}] = None\n"
            "from aka.agent.llm.base import get_backend\n"
            "try:\n"
            f"    get_backend({provider!r})\n"
            "except Exception as e:\n"
            "    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip() == f"MissingSDKError --backend {provider} needs the {provider} SDK: pip install 'aka[llm]'"
