"""scripts/: set-up and CPU tools at the top, the device machine's scripts under scripts/device/ behind
one entry (run.sh STEP...), each step naming a script that exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "scripts" / "device" / "run.sh"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(RUN), *args], capture_output=True, text=True, timeout=60)


def test_the_top_level_holds_only_the_set_up_and_the_cpu_tools():
    top = {p.name for p in (ROOT / "scripts").iterdir()}
    assert top == {"setup.sh", "red_team.py", "sm90_screen.py", "device"}


def test_every_step_runs_a_script_beside_the_entry():
    res = _run("list")
    assert res.returncode == 0, res.stderr
    steps = dict(re.findall(r"^  (\S+)\s+scripts/device/(\S+)$", res.stdout, re.M))
    assert {"loop", "session", "gpu-tests", "bench-checks", "timing-modes"} <= set(steps)
    for step, script in steps.items():
        assert (RUN.parent / script).is_file(), (step, script)


def test_a_misspelt_step_is_refused_before_anything_runs():
    res = _run("gpu-tests", "lopo:cold")
    assert res.returncode == 2
    assert res.stderr.strip() == "run.sh: unknown step 'lopo' (bash scripts/device/run.sh list)"
    assert "== run.sh" not in res.stdout  # gpu-tests did not start


def test_no_step_prints_the_steps_and_fails():
    res = _run()
    assert res.returncode == 2 and "usage: bash scripts/device/run.sh" in res.stdout


def test_the_prep_probe_still_edits_the_baseline_it_probes():
    """scripts/device/gdn_prep_probe.py leaves parts of the prep out by editing the baseline's text: every
    edit must still match it (a changed baseline makes the probe say which edit to update)."""
    import pytest

    from aka.contract.ops import get_op, load_module

    probe = load_module(RUN.parent / "gdn_prep_probe.py")
    base = get_op("gdn_prefill").path("baseline").read_text()
    got = probe.variants(base)
    assert list(got) == ["baseline", "no P", "no inverse", "no substitution", "no P, no inverse"]
    assert len({*got.values()}) == 5 and all(compile(s, name, "exec") for name, s in got.items())
    with pytest.raises(ValueError, match="no P: the baseline no longer has 'WITH_P=cfg"):
        probe.variants(base.replace('WITH_P=cfg["fwd"] == "triton"', 'WITH_P=cfg["fwd"] != "ws"'))


def test_the_config_sweep_reads_its_variants():
    """scripts/device/gdn_config_sweep.py: ';' separates variants, ',' their key=value pairs (Python literals);
    the baseline's own CONFIG always runs first."""
    from aka.contract.ops import load_module

    sweep = load_module(RUN.parent / "gdn_config_sweep.py")
    assert sweep._variants("") == [{}]
    assert sweep._variants("cp=False; cp_segment_chunks=16,BVA=32;") == [
        {}, {"cp": False}, {"cp_segment_chunks": 16, "BVA": 32}]
    assert sweep._variants("cp_warm_log_decay=-10.0") == [{}, {"cp_warm_log_decay": -10.0}]
