from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fakes import make_project  # noqa: E402

from aka.contract.ops import get_op  # noqa: E402


@pytest.fixture
def project(tmp_path):
    return make_project(tmp_path)


@pytest.fixture
def op(project):
    return get_op("gdn_prefill", project)
