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
