"""Every module of aka/ imports on a CPU machine set up as README.md says (issue 20: no module
without a test that imports it). A module moved between packages with a stale import fails here,
not in the one command that happens to reach it."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import aka

MODULES = sorted(m.name for m in pkgutil.walk_packages(aka.__path__, "aka.") if m.name != "aka.__main__")


def test_every_package_is_walked():
    assert {"aka.contract.ops", "aka.evaluate.checker.worker", "aka.run.loop", "aka.report.tables"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name):
    importlib.import_module(name)
