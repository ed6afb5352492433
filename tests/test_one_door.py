"""One door to evaluation (issue 20): only aka.evaluate.parent.door starts a worker (runner.run_task), only
aka.contract.ops imports a file by path, and only aka.hardware reads the device's properties, so
each of these is decided in one place. Read from the source, as test_layers reads the imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AKA = Path(__file__).resolve().parents[1] / "aka"

# name -> the modules that may use it (the one that defines it, the one door to it)
ONLY = {
    "run_task": {"evaluate/parent/runner.py", "evaluate/parent/door.py"},
    "spec_from_file_location": {"contract/ops.py"},
    "get_device_properties": {"hardware.py", "evaluate/host/bench.py"},  # bench: the worker's L2 size for flushes
}


def _uses(tree: ast.AST) -> set[str]:
    """Names in ONLY that the module calls, passes on or imports (x(), pool.submit(x), from m import x)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.alias):
            out.add(node.name.split(".")[-1])
    return out & set(ONLY)


def offenders(root: Path) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for name in sorted(_uses(ast.parse(path.read_text(), str(path)))):
            if rel not in ONLY[name]:
                bad.append(f"aka/{rel} uses {name} (only {', '.join(sorted(ONLY[name]))} may)")
    return bad


def test_one_door_to_the_worker_one_loader_one_device_reading():
    assert not offenders(AKA), "\n".join(offenders(AKA))


@pytest.mark.parametrize("code", ["from aka.evaluate.parent.runner import run_task\nrun_task('m:f', {}, timeout=1)\n",
                                  "import aka.evaluate.parent.runner as r\npool.submit(r.run_task, 'm:f', {})\n"])
def test_the_rule_can_fail(tmp_path, code):
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "bench.py").write_text(code)
    assert offenders(tmp_path) == ["aka/cli/bench.py uses run_task "
                                   "(only evaluate/parent/door.py, evaluate/parent/runner.py may)"]
