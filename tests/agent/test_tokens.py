"""What an attempt costs in tokens (issue 19, parts 3 and 4), through the real SDK clients and the fake
servers, which bill prompt caching as each API does: gdn_prefill's uncached input per attempt after the
first stays under 8k (Anthropic's billing: cache reads are not uncached input), with and without tools;
a budget-10 run of a deterministic stand-in plans nothing twice (the candidate being measured is marked
in flight in the next plan's prompt)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fake_servers import FakeServer
from fakes import REPO, FakeEvaluator, make_project  # noqa: E402
from standins import IdeaModel

from aka.agent.llm.base import get_backend  # noqa: E402
from aka.config import LLMConfig, LLMSettings  # noqa: E402
from aka.contract.ops import get_op  # noqa: E402
from aka.run.loop import run_loop  # noqa: E402
from aka.run.setup import prepare_run  # noqa: E402
from aka.settings import Budget, OptimizeSettings  # noqa: E402

# one-value CONFIG changes of the real gdn_prefill baseline (whole lines, comments included: each occurs once)
_LINES = (REPO / "kernels" / "gdn_prefill" / "baseline.py").read_text().splitlines()


def _line(start: str) -> str:
    return next(ln for ln in _LINES if ln.startswith(start))


GDN_IDEAS = [(f"{key} {old} to {new}", _line(f'    "{key}": {old},'),
              _line(f'    "{key}": {old},').replace(f'"{key}": {old},', f'"{key}": {new},'))
             for key, old, new in (("cp_warm_chunks", 32, 16), ("BVC", 32, 64), ("seg_warps", 4, 8), ("BVA", 64, 32),
                                   ("seg_loop_stages", 3, 2))]

def run(kind, server, project, monkeypatch, budget, tools, ahead=0, delay_s=0.0):
    op = get_op("gdn_prefill", project)
    monkeypatch.setenv(f"{kind.upper()}_API_KEY", "test-key")
    llm = LLMSettings(base_url=server.url, sweep=0, tools=tools)
    settings = OptimizeSettings(op="gdn_prefill", backend=kind, llm=llm, prepare_ahead=ahead,
                                budget=Budget(max_candidates=budget))
    be = get_backend(kind, op=op, llm=llm, config=LLMConfig(max_retries=0, timeout_s=30))
    ev = FakeEvaluator(op, timing="gpu", delay_s=delay_s)
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, be, ev)
    return store.attempts()


def gdn_project(tmp_path: Path) -> Path:
    """The fake project with the real gdn_prefill baseline (29 kB) and the real wiki: the prompts' real size."""
    root = make_project(tmp_path, git=False)
    shutil.copy(REPO / "kernels" / "gdn_prefill" / "baseline.py", root / "kernels" / "gdn_prefill" / "baseline.py")
    shutil.copytree(REPO / "wiki", root / "wiki")
    return root


@pytest.mark.parametrize("tools", [True, False], ids=["tools", "no-tools"])
def test_gdn_prefill_uncached_input_per_attempt_after_the_first_is_under_8k(kind, tools, tmp_path, monkeypatch):
    """Anthropic: explicit breakpoints (the acceptance figure); OpenAI: its automatic prefix caching."""
    project = gdn_project(tmp_path)
    with FakeServer(kind, responder=IdeaModel("gdn_prefill", GDN_IDEAS, tools=tools)) as server:
        att = run(kind, server, project, monkeypatch, 4, tools)
    assert [a.failed_stage for a in att] == [""] * 4 and len({a.code_hash for a in att}) == 4
    if tools:
        assert all([c["name"] for c in a.tool_calls] == ["read_file", "edit", "compile", "check", "submit"]
                   for a in att)
    uncached = [a.usage.input_tokens - a.usage.cached_tokens for a in att]
    total = [a.usage.input_tokens for a in att]
    print(f"\ngdn_prefill, {kind}, {'tools' if tools else 'no tools'}: input per attempt {total}, uncached {uncached}, "
          f"output {[a.usage.output_tokens for a in att]}")
    src_tokens = len("\n".join(_LINES)) // 4  # the fake servers' count: 4 characters a token
    # the incumbent's source (29 kB, ~7k tokens) is in every attempt's prompt...
    assert sum("def _prep64_kernel(" in json.dumps(r) for r in server.requests) >= len(att)
    assert all(u <= 8_000 for u in uncached[1:]), uncached  # ...and read from the cache after the first attempt
    assert uncached[0] > src_tokens  # the first attempt writes it (billed as uncached input)


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_a_budget_10_run_of_a_deterministic_stand_in_plans_nothing_twice(kind, tmp_path, monkeypatch):
    names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"]
    ideas = [(n, "# tag=baseline", f"# tag={n}") for n in names]
    project = make_project(tmp_path, git=False)
    with FakeServer(kind, responder=IdeaModel("gdn_prefill", ideas)) as server:
        # one candidate planned ahead, its compile slow enough that the next plan is made while it is measured
        att = run(kind, server, project, monkeypatch, 10, False, ahead=1, delay_s=0.3)
    plans = [a.plan.hypothesis for a in att]
    assert len(att) == 10 and len(set(plans)) == 10, plans
    assert "duplicate" not in [a.failed_stage for a in att]
