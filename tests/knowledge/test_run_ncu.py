"""run_ncu against a stand-in `ncu` executable: the report/import round trip, the retry without
stall metrics, and the one-line notes when counters cannot be read or ncu is absent."""

import os
import stat
import sys
from pathlib import Path

import pytest

from aka.knowledge import ncu_report, profile

DATA = Path(__file__).parent / "data"

FAKE = '''#!{python}
import os, sys
args = sys.argv[1:]
if "--version" in args:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 1) (public-release)")
    sys.exit(0)
if "--import" in args:
    sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read())
    sys.exit(0)
fail = os.environ.get("FAKE_NCU_FAIL", "")
metrics = args[args.index("--metrics") + 1]
if fail == "regex" and "regex:" in metrics:
    print("==ERROR== Failed to find metric regex:smsp__warp_issue_stalled_.*")
    sys.exit(1)
if fail == "counters":
    print("==ERROR== Failed to initialize the profiler: LibraryNotLoaded")
    sys.exit(1)
assert args[args.index("--clock-control") + 1] == "none"
open(args[args.index("--export") + 1], "w").write("report")
sys.exit(0)
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "ncu"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NCU_CSV", str(DATA / "ncu_raw.csv"))
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_report_round_trip(fake_ncu):
    res = profile.run_ncu(["true"], fake_ncu, timeout=60)
    assert res.ok and res.note == ""
    assert res.version.startswith("Version 2025.3")
    assert [k.name for k in res.kernels][-1] == "_fwd_kernel"
    assert (fake_ncu / "profile.csv").read_text().count("_fwd_kernel") == 1


def test_unknown_stall_metric_retries_without_it(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_FAIL", "regex")
    res = profile.run_ncu(["true"], fake_ncu, timeout=60)
    assert res.ok
    assert "stall reasons left out" in res.note and "metric" in res.note


def test_counters_unreadable_is_a_note_not_an_error(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_FAIL", "counters")
    res = profile.run_ncu(["true"], fake_ncu, timeout=60)
    assert not res.ok and res.kernels == []
    assert "LibraryNotLoaded" in res.note


def test_no_ncu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu_report, "_NCU_PLACES", ())  # where run_ncu's ncu_path() looks
    res = profile.run_ncu(["true"], tmp_path, timeout=5)
    assert not res.ok and "ncu not found" in res.note
