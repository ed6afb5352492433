"""The package layout's rules, read from the source (issue 20): a stage imports no later stage, no
import cycle exists among aka's modules (function-level imports included), and no module imports
another's private name. Within aka.evaluate, the code of each process imports only what may run
in it (test_each_process_imports_only_what_runs_in_it).

Stages are aka's sub-packages in data-flow order (shared/DESIGN.md): a module's folder tells its
stage. The modules directly under aka/ (settings, config, records, hardware, errors, doctor) sit below
every stage but the contract and the wiki, so they may import only those two (issue 41 removed the
last exceptions: the LLM config moved from agent/ to aka/config.py, the wiki from knowledge/ to
aka/wiki/).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AKA = Path(__file__).resolve().parents[1] / "aka"
# data-flow order; a stage may import itself and earlier stages only
STAGES = ("contract", "wiki", "evaluate", "knowledge", "agent", "run", "report", "cli")
# the stages the modules directly under aka/ may import (the device's facts come from the wiki's pages)
BELOW_UNPLACED = ("contract", "wiki")
ENTRY = {"aka.__main__"}  # `python -m aka`: the command line's door, above every stage


def _module_name(path: Path) -> str:
    parts = path.relative_to(AKA.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """aka.* modules `path` imports (with `from aka.x import y`, also aka.x.y when that is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = list(ast.walk(tree)) if not top_level_only else list(_import_time_nodes(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "aka"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "aka":
                continue
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if _exists(f"{node.module}.{a.name}")}
    return {m for m in out if _exists(m)}


def _import_time_nodes(node: ast.AST):
    """Nodes executed when the module is imported: function bodies (lazy imports) left out."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield from _import_time_nodes(child)


def _exists(mod: str) -> bool:
    rel = Path(*mod.split(".")[1:]) if "." in mod else Path()
    return (AKA / rel).with_suffix(".py").is_file() or (AKA / rel / "__init__.py").is_file()


def _stage(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (AKA / parts[1]).is_dir()) else None


MODULES = {_module_name(p): p for p in sorted(AKA.rglob("*.py"))}


def test_no_stage_imports_a_later_stage():
    bad = []
    for mod, path in MODULES.items():
        if mod in ENTRY:
            continue
        here = _stage(mod)
        for dep in _imports(path, top_level_only=False):
            there = _stage(dep)
            if there is None or there == here:
                continue
            if here in STAGES and there in STAGES and STAGES.index(there) > STAGES.index(here):
                bad.append(f"{mod} ({here}) imports {dep} ({there})")
            elif here is None and there not in BELOW_UNPLACED:
                bad.append(f"{mod} (below the stages) imports {dep} ({there})")
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    """Function-level (lazy) imports count too: a cycle hidden in a function body still ties the two
    modules together (issue 41 found three)."""
    graph = {m: {d for d in _imports(p, top_level_only=False) if d != m and not m.startswith(d + ".")}
             for m, p in MODULES.items()}
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        seen[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if seen.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in seen and (cycle := visit(d)):
                return cycle
        stack.pop()
        seen[m] = 2
        return None

    for m in sorted(graph):
        if m not in seen and (cycle := visit(m)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


def test_the_rules_can_fail(tmp_path, monkeypatch):
    """A later-stage import and a cycle written into a scratch package are both found."""
    pkg = tmp_path / "aka"
    (pkg / "report").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "report" / "__init__.py").write_text("")
    (pkg / "report" / "tables.py").write_text("import aka.early\n")
    (pkg / "early.py").write_text("from aka.report import tables\n")
    monkeypatch.setattr(__import__(__name__), "AKA", pkg)
    mods = {_module_name(p): p for p in sorted(pkg.rglob("*.py"))}
    monkeypatch.setattr(__import__(__name__), "MODULES", mods)
    with pytest.raises(AssertionError, match="aka.early .below the stages. imports aka.report.tables"):
        test_no_stage_imports_a_later_stage()
    with pytest.raises(pytest.fail.Exception, match="import cycle: aka.early -> aka.report.tables -> aka.early"):
        test_no_import_cycle()


# aka.evaluate's sub-packages by the process their code runs in (aka/evaluate/__init__.py)
PROCESS_PARTS = ("parent", "checker", "host", "static")


def _part(mod: str) -> str | None:
    """'parent', 'checker', 'host' or 'static' for a module of that sub-package of aka.evaluate, else None."""
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "evaluate" and parts[2] in PROCESS_PARTS else None


def _reach(mod: str, graph: dict[str, set[str]]) -> set[str]:
    """Every module `mod` imports, directly or through others (function-level imports included)."""
    seen: set[str] = set()
    todo = [mod]
    while todo:
        for d in graph.get(todo.pop(), ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def _starts_processes(path: Path) -> bool:
    """The module imports subprocess or multiprocessing (anywhere in it)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n.split(".")[0] in ("subprocess", "multiprocessing") for n in names):
            return True
    return False


def test_each_process_imports_only_what_runs_in_it():
    """The candidate's process (aka.evaluate.host) and the static code never reach the parent's or the
    checker's modules, and the checker never reaches a parent module that starts processes (the runner,
    the spares, and the door and the evaluator through them): through any chain of imports."""
    graph = {m: _imports(p, top_level_only=False) for m, p in MODULES.items()}
    bad = []
    for mod in MODULES:
        part = _part(mod)
        for dep in sorted(_reach(mod, graph)) if part else ():
            there = _part(dep)
            if part in ("host", "static") and there in ("parent", "checker"):
                bad.append(f"{mod} ({part}) reaches {dep} ({there})")
            elif part == "checker" and there == "parent" and _starts_processes(MODULES[dep]):
                bad.append(f"{mod} (checker) reaches {dep}, a parent module that starts processes")
    assert not bad, "\n".join(bad)


def test_the_process_rule_can_fail(tmp_path, monkeypatch):
    """A host module that imports the parent, and a checker module that reaches the runner through the
    door, are both found."""
    ev = tmp_path / "aka" / "evaluate"
    for part in PROCESS_PARTS:
        (ev / part).mkdir(parents=True)
        (ev / part / "__init__.py").write_text("")
    (tmp_path / "aka" / "__init__.py").write_text("")
    (ev / "__init__.py").write_text("")
    (ev / "parent" / "runner.py").write_text("import subprocess\n")
    (ev / "parent" / "door.py").write_text("from aka.evaluate.parent import runner\n")
    (ev / "parent" / "outcomes.py").write_text("")
    (ev / "host" / "main.py").write_text("def f():\n    from aka.evaluate.parent.outcomes import x\n")
    (ev / "checker" / "gate.py").write_text("from aka.evaluate.parent.outcomes import y\n"
                                            "def g():\n    import aka.evaluate.parent.door\n")
    monkeypatch.setattr(__import__(__name__), "AKA", tmp_path / "aka")
    mods = {_module_name(p): p for p in sorted((tmp_path / "aka").rglob("*.py"))}
    monkeypatch.setattr(__import__(__name__), "MODULES", mods)
    with pytest.raises(AssertionError) as err:
        test_each_process_imports_only_what_runs_in_it()
    found = str(err.value)
    assert "aka.evaluate.host.main (host) reaches aka.evaluate.parent.outcomes (parent)" in found
    assert "aka.evaluate.checker.gate (checker) reaches aka.evaluate.parent.runner, a parent module that starts " \
           "processes" in found
    assert "outcomes, a parent module" not in found  # reading results starts nothing


def _private_imports(path: Path) -> list[str]:
    """'aka.x._name' for each private name `path` imports from another aka module (anywhere in it)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("aka"):
            out += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")
                    and not a.name.startswith("__") and not _exists(f"{node.module}.{a.name}")]
    return out


def test_no_private_name_is_imported_across_modules():
    """A leading underscore says 'this module's own': another module that needs it gets a public name."""
    found = {m: names for m, p in MODULES.items() if (names := _private_imports(p))}
    assert not found, found
