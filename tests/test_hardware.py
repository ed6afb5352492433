"""Hardware facts: exact-name matching, explicit unknowns, no borrowed numbers, mismatch reports."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner
from wiki_pages import GOOD_HARDWARE

from aka.cli.main import app
from aka.contract.ops import project_root
from aka.hardware import Detected, merge
from aka.wiki import load_wiki, parse_page


@pytest.fixture(scope="module")
def cards():
    """The project's real wiki, whose hardware pages the detected device is merged with."""
    return load_wiki(project_root() / "wiki")

H200 = Detected(name="NVIDIA H200", capability="9.0", sm_count=132, l2_bytes=62914560,
                smem_per_sm_bytes=233472, smem_per_block_optin_bytes=232448, regs_per_sm=65536)


def test_h200_matches_its_page(cards):
    hw = merge(H200, cards)
    assert hw.known and hw.page_id == "h200" and hw.arch == "sm_90"
    assert hw.value("hbm_bandwidth_gbs") == 4800 and hw.value("measured_copy_gbs") == 4300
    assert hw.value("wgmma") is True and hw.mismatches == []


@pytest.mark.parametrize("name", ["NVIDIA H200 NVL", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-40GB", "NVIDIA GB200",
                                  "Some Future GPU"])
def test_unknown_names_are_explicitly_unknown(cards, name):
    hw = merge(Detected(name=name, capability="9.0", sm_count=114), cards)
    assert not hw.known
    assert name in hw.reason and "unknown part" in hw.reason
    assert hw.facts == {} and hw.page_id is None  # never another part's numbers
    assert hw.value("bf16_dense_tflops") is None
    assert hw.summary()["sm_count"] == 114  # what the device said is still reported


def test_matching_ignores_case_and_spacing_only(cards):
    assert merge(H200.model_copy(update={"name": "nvidia  h200"}), cards).page_id == "h200"
    assert not merge(H200.model_copy(update={"name": "NVIDIA H20"}), cards).known


def test_no_gpu_is_unknown(cards):
    hw = merge(None, cards)
    assert not hw.known and "no GPU" in hw.reason and hw.facts == {}


def test_capability_disagreement_is_unknown(cards):
    hw = merge(H200.model_copy(update={"capability": "10.0"}), cards)
    assert not hw.known and "capability" in hw.reason and hw.facts == {}


def test_mismatch_is_reported_and_device_value_wins(cards):
    hw = merge(H200.model_copy(update={"l2_bytes": 52428800}), cards)
    assert hw.known and len(hw.mismatches) == 1 and hw.mismatches[0].startswith("l2_bytes: device 52428800")
    assert hw.summary()["l2_bytes"] == 52428800


def test_name_claimed_by_two_pages_is_unknown(tmp_path):
    pages = []
    for pid in ("one", "two"):
        p = tmp_path / "hardware" / f"{pid}.md"
        p.parent.mkdir(exist_ok=True)
        p.write_text(GOOD_HARDWARE.format(id=pid, name="NVIDIA Twin"))
        pages.append(parse_page(p))
    hw = merge(Detected(name="NVIDIA Twin", capability="9.0"), pages)
    assert not hw.known and "several pages" in hw.reason


def test_cli_hw_with_unknown_name():
    res = CliRunner().invoke(app, ["hw", "--name", "NVIDIA H200 NVL", "--json"])
    assert res.exit_code == 0, res.output
    assert '"known": false' in res.output and "bf16_dense_tflops" not in res.output


def test_clock_limits_read_from_nvidia_smi(monkeypatch):
    """Issue 22: a measurement records the device's clock limits; the GPU asked about is the one this
    process measures on (a Ray worker's CUDA_VISIBLE_DEVICES), and what nvidia-smi cannot say is left out."""
    import subprocess

    from aka import hardware

    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="1980, [N/A], 3201\n", stderr="")

    monkeypatch.setattr(hardware.subprocess, "run", fake_run)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert hardware.clocks() == {"sm_max_mhz": 1980, "mem_max_mhz": 3201}
    assert seen[0][:3] == ["nvidia-smi", "-i", "3"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    hardware.clocks()
    assert seen[1][2] == "0"

    def missing(cmd, **kw):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(hardware.subprocess, "run", missing)
    assert hardware.clocks() is None
    monkeypatch.setattr(hardware.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 9, stdout="", stderr="no device"))
    assert hardware.clocks("GPU-0f00") is None
