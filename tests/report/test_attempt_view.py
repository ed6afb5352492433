"""Issue 40, what the model did and what it cost: `aka show RUN --attempt N` (aka.report.attempt_view).

The text is plain (no rich markup, no wrapping), so it reads the same with no terminal, COLUMNS
unset or COLUMNS=80.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aka.cli import runs as runs_cli
from aka.cli.show_attempt import show_attempt
from aka.records import Attempt, Plan, Usage
from aka.report.attempt_view import UnknownAttemptError, attempt_text

START = "CONFIG = {'BV': 64, 'warps': 4}\n\ndef kernel(x):\n    return x\n"
C0 = "CONFIG = {'BV': 128, 'warps': 4}\n\ndef kernel(x):\n    return x\n"  # promoted
C1 = "CONFIG = {'BV': 128, 'warps': 8}\n\ndef kernel(x):\n    return x\n"  # measured against C0


def _run(tmp_path: Path) -> Path:
    d = tmp_path / "runs" / "gdn_prefill" / "20261204-101010-abcdef"
    (d / "candidates").mkdir(parents=True)
    (d / "candidates" / "incumbent.py").write_text(START)
    (d / "candidates" / "0.py").write_text(C0)
    (d / "candidates" / "1.py").write_text(C1)
    (d / "run.json").write_text(json.dumps({
        "run_id": d.name, "op": "gdn_prefill", "status": "finished",
        "settings": {"backend": "anthropic", "llm": {"model": "claude-sonnet-4-6"}},
        "incumbent": {"label": "promoted", "hash": "start", "path": str(d / "candidates" / "incumbent.py")}}))
    plan = Plan(hypothesis="8 warps hide the latency of the K loads", structural_change="",
                expected_effect={"batch 1, long": "-5%"}, risks=["register spills at 8 warps"],
                param_ranges={"warps": [8]}, cited_evidence=["prof:stall:_fwd_kernel long scoreboard 41%"])
    recs = [
        Attempt(n=0, plan=Plan(hypothesis="wider BV"), code_hash="h0",
                decision={"promote": True, "verdict": "promoted", "reason": "geomean gain +3.0% (noise 0.2%)"}),
        Attempt(n=1, plan=plan, code_hash="h1", tokens=14_310,
                usage=Usage(input_tokens=14_000, cached_tokens=9_000, cache_write_tokens=1_000, output_tokens=310,
                            cost_usd=0.0213),
                llm_calls=[{"stage": "plan"}, {"stage": "codegen"}],
                tool_calls=[{"n": 1, "name": "read_file", "arguments": {"path": "kernels/gdn_prefill/model.py"},
                             "ok": True, "result": "x" * 500, "seconds": 0.01,
                             "usage": {"input_tokens": 7000, "output_tokens": 100}},
                            {"n": 2, "name": "edit", "arguments": '{"search": "nope", "replace": "x"}', "ok": False,
                             "result": "edit 1 of 1: SEARCH text starting 'nope' is not in the module", "seconds": 0},
                            {"n": 3, "name": "submit", "arguments": {"note": "warps 8"}, "ok": True, "seconds": 0}],
                measurements={"geomean": 1.004, "noise": 0.002},
                decision={"promote": False, "verdict": "not promoted",
                          "reason": "not promoted: geomean gain +0.40% below min_gain 1%"}),
        Attempt(n=2, failed_stage="plan", usage=Usage(input_tokens=900, output_tokens=20),
                decision={"promote": False, "verdict": "rejected", "reason": "plan: the answer is not JSON"}),
    ]
    (d / "attempts.jsonl").write_text("".join(r.to_json() + "\n" for r in recs))
    (d / "llm").mkdir()
    for i, (att, stage) in enumerate([(0, "plan"), (1, "plan"), (1, "codegen"), (2, "plan")]):
        (d / "llm" / f"{i:04d}.json").write_text(json.dumps(
            {"n": i, "attempt": att, "stage": stage, "provider": "anthropic", "request": {},
             "response": {"text": "{}", "model": "claude-sonnet-4-6"}, "usage": {}, "seconds": 1.5, "error": ""}))
    return d


def test_attempt_shows_plan_diff_tools_cost_and_decision(tmp_path):
    text = attempt_text(_run(tmp_path), 1)
    # the plan in full
    for s in ("8 warps hide the latency of the K loads", "batch 1, long: -5%", "register spills at 8 warps",
              "prof:stall:_fwd_kernel long scoreboard 41%", "structural change: (none: parameters only)"):
        assert s in text, s
    # the diff is against candidate 0, promoted before it, not the run's starting copy
    assert "against candidate 0 (promoted): candidates/0.py" in text
    assert "--- candidate 0\n+++ candidate 1\n" in text
    assert "-CONFIG = {'BV': 128, 'warps': 4}\n+CONFIG = {'BV': 128, 'warps': 8}" in text
    assert "'BV': 64" not in text
    # tool calls: name, ok, arguments summarised, results clipped
    assert ' 1. read_file({"path":"kernels/gdn_prefill/model.py"}) ok' in text
    assert " 2. edit(" in text and ") error," in text and "is not in the module" in text
    assert " 3. submit(" in text
    assert "x" * 100 not in text
    # tokens and cost: the attempt's usage
    assert "14,000 in (5,000 uncached, 9,000 read from the cache, 1,000 written to it), 310 out; ~$0.0213" in text
    assert "2 model calls: plan, codegen" in text
    assert "llm/0001.json: plan" in text and "llm/0002.json: codegen" in text and "llm/0000.json" not in text
    # the decision, with the measured figure against the kernel in place
    assert "not promoted: not promoted: geomean gain +0.40% below min_gain 1%" in text
    assert "vs incumbent 1.0040x (ABBA)" in text


def test_before_any_promotion_the_diff_is_against_the_starting_kernel(tmp_path):
    text = attempt_text(_run(tmp_path), 0)
    assert "against promoted (the run's starting kernel): candidates/incumbent.py" in text
    assert "-CONFIG = {'BV': 64, 'warps': 4}\n+CONFIG = {'BV': 128, 'warps': 4}" in text
    assert "no model tokens" in text


def test_a_failed_attempt_without_a_source_and_without_a_price(tmp_path):
    text = attempt_text(_run(tmp_path), 2)
    assert "(no plan recorded: the attempt failed at plan)" in text
    assert "(no candidate source: the attempt failed at plan)" in text
    assert "900 in" in text and "no price for this model" in text
    assert "rejected: plan: the answer is not JSON" in text


def test_an_unknown_attempt_is_one_line_naming_the_range(tmp_path):
    d = _run(tmp_path)
    with pytest.raises(UnknownAttemptError) as exc:
        attempt_text(d, 7)
    msg = str(exc.value)
    assert "\n" not in msg and msg == "run 20261204-101010-abcdef has attempts 0-2; there is no attempt 7"
    with pytest.raises(UnknownAttemptError, match="has attempts 0-2; there is no attempt -1"):
        attempt_text(d, -1)


def test_the_text_is_the_same_on_any_terminal(tmp_path):
    d = _run(tmp_path)
    code = ("import sys; from pathlib import Path; from aka.report.attempt_view import attempt_text; "
            "sys.stdout.write(attempt_text(Path(sys.argv[1]), 1))")
    outs = []
    for env in ({}, {"COLUMNS": "80"}):  # no TTY (captured), COLUMNS unset, then 80
        e = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | env
        outs.append(subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True, env=e,
                                   check=True).stdout)
    assert outs[0] == outs[1] == attempt_text(d, 1)
    assert max(len(line) for line in outs[0].splitlines()) > 80  # nothing wrapped or cut to the width


def _aka(root: Path, *args: str, columns: str | None = None):
    code = "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"AKA_ROOT": str(root)}
    if columns:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env)


def test_show_attempt_helper(gpu_run, project, capsys, monkeypatch):
    monkeypatch.setenv("AKA_ROOT", str(project))
    show_attempt(gpu_run.name, 3)
    assert capsys.readouterr().out == attempt_text(gpu_run, 3)
    with pytest.raises(UnknownAttemptError, match=r"has attempts 0-5; there is no attempt 9"):
        show_attempt(gpu_run.name, 9)


@pytest.mark.skipif("attempt" not in inspect.signature(runs_cli.show).parameters,
                    reason="the --attempt hook is not in aka/cli/runs.py yet")
def test_cli_show_attempt(gpu_run, project):
    for columns in (None, "80"):
        r = _aka(project, "show", gpu_run.name, "--attempt", "3", columns=columns)
        assert r.returncode == 0, r.stderr
        assert r.stdout == attempt_text(gpu_run, 3)
        bad = _aka(project, "show", gpu_run.name, "--attempt", "9", columns=columns)
        assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0
        assert "has attempts 0-5; there is no attempt 9" in bad.stderr


def test_a_real_loop_run_diffs_each_attempt_against_the_kernel_it_was_measured_against(gpu_run):
    # report_runs.STEPS: attempt 2 promoted (tag a), attempt 3 (tag b) was measured against it
    t3 = attempt_text(gpu_run, 3)
    assert "against candidate 2 (promoted): candidates/2.py" in t3 and "+++ candidate 3" in t3
    t2 = attempt_text(gpu_run, 2)
    assert "(the run's starting kernel): candidates/incumbent.py" in t2
    t5 = attempt_text(gpu_run, 5)  # after the second promotion candidate 2 is still in place until 5 decides
    assert "against candidate 2 (promoted)" in t5 and "promoted:" in t5
