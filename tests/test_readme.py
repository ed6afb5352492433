"""The README's numbers come from the tool: a newcomer reads them before running anything (issue 40)."""

from __future__ import annotations

import re
from pathlib import Path

from aka.contract.ops import get_op, op_names

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_shape_table_matches_the_contracts():
    rows = re.findall(r"^\| `(\w+)` \| .* \| (\d+) / (\d+) / (\d+) \|$", README.read_text(), re.MULTILINE)
    assert rows, "README.md has no operator table with full / smoke / edge counts"
    table = {op: tuple(map(int, counts)) for op, *counts in rows}
    ops = set(op_names())
    assert set(table) == ops, f"README lists {sorted(table)}, the contracts are {sorted(ops)}"
    for name, counts in table.items():
        op = get_op(name)
        assert counts == tuple(len(op.cases(s)) for s in ("full", "smoke", "edge")), name


def test_the_test_command_is_the_one_ci_runs():
    ci = (README.parent / ".ci" / "run").read_text()
    assert ".venv/bin/python -m pytest -q" in README.read_text() and ".venv/bin/python -m pytest -q" in ci
