"""Messages a newcomer reads (issue 40 point 8): each says what happened and what to do."""

from __future__ import annotations

from fakes import source
from typer.testing import CliRunner

import aka.cli.check
from aka.cli.main import app
from aka.contract.ops import get_op
from aka.evaluate.parent.outcomes import code_hash
from aka.evaluate.static.policy import check_source
from aka.evaluate.wire import GateReport
from aka.records import Promoted
from aka.run import gitops


def test_a_refused_import_says_what_may_be_imported():
    msg = check_source("import os\n", get_op("gdn_prefill").spec).message
    assert "import of 'os' is not allowed; a candidate may import" in msg and "triton.language" in msg
    assert "torch" in msg and "math" in msg


def test_check_reports_the_rounds_asked_for_and_the_warm_call_apart(monkeypatch, project):
    # the gate runs --rounds (3) fresh rounds, then one warm call; `rounds=4` read as a miscount
    report = GateReport(op="gdn_prefill", kernel="k.py", passed=True, n_rounds=4, shapes="smoke")
    monkeypatch.setattr(aka.cli.check, "check_kernel", lambda *a, **kw: report)
    res = CliRunner().invoke(app, ["check", "gdn_prefill", "--shapes", "smoke"], env={"AKA_ROOT": str(project),
                                                                                      "COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "3 rounds + 1 warm call" in res.stdout and "rounds=4" not in res.stdout


def test_rollback_says_what_it_restored(project):
    a, b = source(1.2, "a"), source(1.3, "b")
    for src, n in ((a, 3), (b, 5)):
        gitops.promote(project, "gdn_prefill", src, Promoted(code_hash=code_hash(src), run_id="R", attempt=n),
                       f"promote {n}", True)
    env = {"AKA_ROOT": str(project), "COLUMNS": "80"}
    res = CliRunner().invoke(app, ["rollback", "gdn_prefill"], env=env)
    assert res.exit_code == 0, res.output
    assert f"restored the kernel of run R attempt 3 (code {code_hash(a)})" in res.stdout
    first = gitops.history(project, "gdn_prefill")[-1].rev  # the first promotion: before it, the baseline
    res = CliRunner().invoke(app, ["rollback", "gdn_prefill", "--to", f"{first}~1"], env=env)
    assert res.exit_code == 0 and "restored no promoted kernel: the op runs its baseline" in res.stdout, res.output


def test_hw_without_a_gpu_says_so_in_one_line_and_how_to_read_a_page(monkeypatch):
    import aka.hardware

    monkeypatch.setattr(aka.hardware, "detect_device", lambda index=0: None)  # a CPU-only machine
    for columns in ("80", None):
        res = CliRunner().invoke(app, ["hw"], env={"COLUMNS": columns})
        assert res.exit_code == 0, res.output  # nothing here is not an error, as for `aka runs`
        line = " ".join(res.stdout.split())  # soft-wrapped: one line, however wide the terminal
        assert res.stdout.strip().count("\n") == 0 and "┏" not in res.stdout, res.stdout  # no empty table
        assert line.startswith("no GPU: CUDA is not available on this machine. On a GPU, aka hw lists")
        assert "aka hw --name 'NVIDIA A100-SXM4-80GB'" in line and "'NVIDIA H200'" in line
    # what the line offers works here, with the page's own capability (the A100 is 8.0, not the 9.0 default)
    res = CliRunner().invoke(app, ["hw", "--name", "NVIDIA A100-SXM4-80GB"], env={"COLUMNS": "80"})
    assert res.exit_code == 0 and res.stdout.startswith("known: matched wiki/hardware/a100.md"), res.output
    assert "driver" not in res.stdout  # a hypothetical device reports only its name and capability
