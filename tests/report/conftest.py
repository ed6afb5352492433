"""Fixtures for the report and regress tests: a project in a temp git repo, runs of the real loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import source  # noqa: E402
from report_runs import run_loop_in  # noqa: E402


@pytest.fixture
def gpu_run(project) -> Path:
    return run_loop_in(project, "gpu", tokens=1000)


@pytest.fixture
def cpu_run(project) -> Path:
    return run_loop_in(project, "interpreter", steps=[{"source": source(0.9)}, {"source": source(1.0, gate="fail")}],
                       competitors=False)

