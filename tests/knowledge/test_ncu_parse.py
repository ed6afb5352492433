"""Parsing saved ncu reports: the wide --page raw layout (with a units row and n/a values) and the long one."""

from pathlib import Path

import pytest

from aka.knowledge.ncu_report import METRICS, ncu_collect_cmd, ncu_export_cmd, parse_ncu_csv

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def raw():
    return {k.name: k for k in parse_ncu_csv((DATA / "ncu_raw.csv").read_text())}


def test_one_profile_per_launch_in_launch_order():
    kernels = parse_ncu_csv((DATA / "ncu_raw.csv").read_text())
    assert [k.name for k in kernels] == ["_index_kernel", "_prep_kernel", "_seg_kernel", "_chain_kernel", "_fwd_kernel"]
    assert [k.launch for k in kernels] == [0, 1, 2, 3, 4]
    assert all(k.source == "ncu" for k in kernels)


def test_values_thousands_separators_and_ns_to_us(raw):
    fwd = raw["_fwd_kernel"]
    assert fwd.duration_us == pytest.approx(612.736)
    assert fwd.dram_throughput_pct == pytest.approx(2.44)
    assert fwd.memory_throughput_pct == pytest.approx(8.91)
    assert fwd.sm_throughput_pct == pytest.approx(29.13)
    assert fwd.achieved_occupancy_pct == pytest.approx(11.87)
    assert fwd.theoretical_occupancy_pct == pytest.approx(12.5)
    assert fwd.l2_hit_rate_pct == pytest.approx(95.02)
    assert fwd.registers_per_thread == 255
    assert fwd.smem_wavefronts == 2097152
    assert raw["_prep_kernel"].smem_bank_conflicts_st == 96512
    assert raw["_prep_kernel"].smem_bank_conflicts_ld == 1204
    assert fwd.missing == []


def test_top_three_stalls_exclude_selected(raw):
    fwd = raw["_fwd_kernel"]
    assert [(s.reason, s.fraction) for s in fwd.stalls] == [
        ("long_scoreboard", pytest.approx(0.5535)), ("wait", pytest.approx(0.1502)), ("math_pipe_throttle", 0.049)]
    idx = raw["_index_kernel"]  # selected (8.12 %) is the issuing warp, never a stall
    assert "selected" not in [s.reason for s in idx.stalls]
    assert [s.reason for s in idx.stalls] == ["long_scoreboard", "wait"]  # zeros are dropped


def test_missing_metrics_are_none_and_named(raw):
    chain = raw["_chain_kernel"]
    assert chain.duration_us == pytest.approx(88.48)
    assert chain.dram_throughput_pct is None and chain.l2_hit_rate_pct is None
    assert chain.stalls == []
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" in chain.missing
    assert "gpu__time_duration.sum" not in chain.missing


def test_long_layout_and_time_units():
    kernels = {k.name: k for k in parse_ncu_csv((DATA / "ncu_details.csv").read_text())}
    assert kernels["_fwd_kernel"].duration_us == pytest.approx(612.74)  # usecond
    assert kernels["_chain_kernel"].duration_us == pytest.approx(88.48)  # msecond
    assert kernels["_fwd_kernel"].stalls[0].reason == "long_scoreboard"
    assert kernels["_fwd_kernel"].l2_hit_rate_pct is None  # absent column, not zero


def test_no_header_means_no_kernels():
    assert parse_ncu_csv("==PROF== Connected\n==ERROR== LibraryNotLoaded\n") == []


def test_columns_missing_entirely_from_a_wide_report():
    text = ('"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n"0","void k(int)","1,500"\n')
    (k,) = parse_ncu_csv(text)
    assert k.name == "k" and k.duration_us == pytest.approx(1.5)
    assert len(k.missing) == len(METRICS) - 1


def test_command_lines():
    cmd = ncu_collect_cmd("ncu", Path("/tmp/r.ncu-rep"), ["python", "-m", "x"])
    assert cmd[:3] == ["ncu", "--clock-control", "none"]
    assert ["--profile-from-start", "off"] == cmd[cmd.index("--profile-from-start"):][:2]
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert "gpu__time_duration.sum" in metrics and any(m.startswith("regex:smsp__warp_issue_stalled") for m in metrics)
    assert cmd[-3:] == ["python", "-m", "x"]
    exp = ncu_export_cmd("ncu", Path("/tmp/r.ncu-rep"))
    assert exp[exp.index("--page") + 1] == "raw" and "--csv" in exp and "base" in exp
