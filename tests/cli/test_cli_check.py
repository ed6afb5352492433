"""`aka check`: a per-shape table, the JSON report, and an exit code that says pass or fail."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from aka.cli.main import app

ADV = Path(__file__).parents[1] / "evaluate" / "adversarial"
runner = CliRunner()


def test_default_kernel_smoke_passes_and_writes_json(tmp_path):
    """Without --kernel the op's current kernel is checked: the promoted one where there is one."""
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["check", "fa4_decode", "--shapes", "smoke", "--rounds", "2", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "S1" in res.output and "S2" in res.output and "PASSED" in res.output
    report = json.loads(out.read_text())
    kdir = Path(__file__).parents[2] / "kernels" / "fa4_decode"
    current = "promoted.py" if (kdir / "promoted.py").exists() else "baseline.py"
    assert report["passed"] and report["kernel"].endswith(f"kernels/fa4_decode/{current}")
    assert [r["id"] for r in report["results"]] == ["S1", "S2"]


def test_gdn_prefill_smoke_runs_on_cpu(tmp_path):
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["check", "gdn_prefill", "--shapes", "smoke", "--json", str(out)])
    report = json.loads(out.read_text())
    assert report["interpreter"] and report["n_rounds"] == 4
    assert {r["id"] for r in report["results"]} == {"S1", "S2"}
    assert "final" in res.output  # both outputs have rows (the column may be cut on a narrow terminal)
    assert res.exit_code == (0 if report["passed"] else 1)


def test_rejected_candidate_exits_1_with_reason():
    res = runner.invoke(app, ["check", "fa4_decode", "--kernel", str(ADV / "cached.py"), "--shapes", "S1"])
    assert res.exit_code == 1
    assert "cached result" in res.output and "FAILED (check)" in res.output


def test_policy_refusal_exits_1():
    res = runner.invoke(app, ["check", "gdn_prefill", "--kernel", str(ADV / "imports_reference.py")])
    assert res.exit_code == 1 and "FAILED (policy)" in res.output


def test_usage_errors_are_one_line():
    res = runner.invoke(app, ["check", "fa4_decode", "--rounds", "1"])
    assert res.exit_code == 1 and "use at least 2" in str(res.exception)
    res = runner.invoke(app, ["check", "fa4_decode", "--kernel", "/nonexistent.py"])
    assert "no such kernel file" in str(res.exception)
