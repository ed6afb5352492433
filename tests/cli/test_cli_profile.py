"""`aka profile` on a machine without a CUDA GPU: one line that says a GPU is needed, exit code 2."""

import json

import pytest
import torch
from typer.testing import CliRunner

from aka.cli.main import app
from aka.evaluate.static.compstats import INTERPRETER

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")


def test_cpu_explains_it_needs_a_gpu(tmp_path):
    out = tmp_path / "p.json"
    res = CliRunner().invoke(app, ["profile", "gdn_prefill", "--shape", "G1", "--json", str(out)])
    assert res.exit_code == 2
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert any(line.startswith("error: profiling needs a CUDA GPU") for line in lines)
    assert f"compile stats: {INTERPRETER}" in lines
    summary = json.loads(out.read_text())
    assert summary["source"] == "none" and summary["compile"]["available"] is False
    assert summary["shape"] == "G1" and summary["kernels"] == []


def test_default_shape_is_the_first_full_case(tmp_path):
    out = tmp_path / "p.json"
    res = CliRunner().invoke(app, ["profile", "gdn_prefill", "--json", str(out)])
    assert res.exit_code == 2
    assert json.loads(out.read_text())["shape"] == "G1"


def test_a_shape_set_is_refused_in_one_line():
    res = CliRunner().invoke(app, ["profile", "gdn_prefill", "--shape", "smoke"])
    assert res.exit_code != 0 and res.exit_code != 2
    assert "give one shape id" in str(res.exception)
