"""What crosses a process boundary in aka.evaluate is typed (issue 41, "one typed result per stage
boundary"): no ``dict[str, Any]`` crosses a process or file boundary outside the wire module.

Read from the source, as tests/test_layers.py reads the layout. A *boundary function* is a function of
aka/evaluate's process parts (parent, checker, host, static), or of the shared modules beside them but the
wire, that

- calls one of the exchange's send or receive helpers: ``json.dumps``/``json.loads``/``json.dump``/
  ``json.load``, a Host's ``.request``, the door's ``call``/``run``/``call_following``, the runner's
  ``run_task``, ``wire.call_typed`` or the checker's ``run_host_task``; or
- is a task entry: named by a ``"aka.module:function"`` string anywhere in aka (a worker task, a harness
  the candidate's process runs), or one of the candidate's process's request handlers.

None of its parameters or its return may be annotated ``dict[str, Any]`` (``Dict[str, Any]`` and a bare
``dict`` count too, nested ones included: ``list[dict[str, Any]]``). ``REMAINING`` names the ones still
left, each with the reason; one that no longer breaks the rule must leave the list, so the list only
shrinks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

AKA = Path(__file__).resolve().parents[1] / "aka"
PARTS = ("parent", "checker", "host", "static")
HELPERS = {("json", "dumps"), ("json", "loads"), ("json", "dump"), ("json", "load"),
           ("door", "call"), ("door", "run"), ("door", "call_following")}
HELPER_NAMES = {"run_task", "call_typed", "run_host_task"}
HANDLERS = {"aka.evaluate.host.main": {"_load", "_call", "_task", "_answer"}}
UNTYPED = re.compile(r"\b(?:dict|Dict)\[str, *Any\]|(?:^|[\[, |])(?:dict|Dict)(?=$|[\], |])")
TASK = re.compile(r"^(aka(?:\.\w+)+):(\w+)$")

# boundary functions still typed with dict[str, Any], and why each stays so
REMAINING = {
    # Triton's specialisation records stay in the compile call's process: they hold JIT functions, the
    # forked children inherit them and nothing serialises them ("data" is Triton's own JSON description)
    "aka.evaluate.precompile._compile_one": "an in-process Triton specialisation record",
    "aka.evaluate.precompile._child": "in-process Triton specialisation records (writes a ChildCompiled)",
    "aka.evaluate.precompile.compile_forked": "in-process Triton specialisation records",
}


def _task_entries(root: Path) -> set[str]:
    """'module.function' of every "aka.module:function" string in the package: the worker tasks and the
    harnesses the candidate's process runs."""
    out: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := TASK.match(node.value)):
                out.add(f"{m[1]}.{m[2]}")
    return out


def _helper(fn: ast.AST) -> str | None:
    """The first send or receive helper `fn` calls, as written; None when it calls none."""
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (f.value.id, f.attr) in HELPERS:
            return f"{f.value.id}.{f.attr}"
        if isinstance(f, ast.Attribute) and f.attr == "request":
            return ".request"
        if isinstance(f, ast.Name) and f.id in HELPER_NAMES:
            return f.id
    return None


def _untyped(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """'name: annotation' of each parameter (and the return) annotated with an untyped dict."""
    args = fn.args
    pairs = [(a.arg, a.annotation) for a in args.posonlyargs + args.args + args.kwonlyargs]
    pairs += [(a.arg, a.annotation) for a in (args.vararg, args.kwarg) if a is not None]
    pairs.append(("return", fn.returns))
    return [f"{name}: {text}" for name, ann in pairs if ann is not None and UNTYPED.search(text := ast.unparse(ann))]


def violations(root: Path = AKA) -> dict[str, str]:
    """{'module.function': why} for every boundary function of aka/evaluate's parts that takes or returns
    an untyped dict."""
    entries = _task_entries(root)
    found: dict[str, str] = {}
    # the parts' modules, and the shared ones beside them (the precompile forks and pipes JSON), but the wire
    shared = [p for p in sorted((root / "evaluate").glob("*.py")) if p.name != "wire.py"]
    for paths in (*(sorted((root / "evaluate" / part).glob("*.py")) for part in PARTS), shared):
        for path in paths:
            mod = ".".join(("aka", *path.relative_to(root).with_suffix("").parts))
            for fn in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                name = f"{mod}.{fn.name}"
                how = _helper(fn) or ("task entry" if name in entries else None) or (
                    "request handler" if fn.name in HANDLERS.get(mod, ()) else None)
                if how and (bad := _untyped(fn)):
                    found[name] = f"{how}; {', '.join(bad)}"
    return found


def test_no_untyped_dict_crosses_a_process_boundary():
    found = violations()
    new = {k: v for k, v in found.items() if k not in REMAINING}
    assert not new, "boundary functions that take or return dict[str, Any] (type the payload in " \
                    "aka/evaluate/wire.py):\n" + "\n".join(f"{k}: {v}" for k, v in sorted(new.items()))
    stale = sorted(k for k in REMAINING if k not in found)
    assert not stale, f"typed now: remove from REMAINING: {stale}"


def test_the_boundary_rule_can_fail(tmp_path):
    """A host handler, a worker task named by a task string, and a function that reads a pipe with
    json.loads, each with an untyped dict, are all found; the typed ones and a plain helper are not."""
    ev = tmp_path / "evaluate"
    for part in PARTS:
        (ev / part).mkdir(parents=True)
    (ev / "host" / "main.py").write_text(
        "from typing import Any\n"
        "def _call(s, req: dict[str, Any]) -> dict[str, Any]:\n    return {}\n"
        "def _load(s, req: LoadRequest) -> HostAnswer:\n    return HostAnswer(ok=True)\n")
    (ev / "checker" / "tasks.py").write_text(
        "def fancy_worker(payload: dict) -> BenchValue:\n    ...\n"
        "def read(fd) -> list[dict[str, Any]]:\n    return json.loads(fd.read())\n"
        "def pure(rows: dict[str, Any]) -> int:\n    return len(rows)\n"
        "def store(path, record: dict | None) -> None:\n    path.write_text(json.dumps(record))\n")
    (ev / "parent" / "evaluator.py").write_text('TASK = "aka.evaluate.checker.tasks:fancy_worker"\n')
    found = violations(tmp_path)
    assert set(found) == {"aka.evaluate.host.main._call", "aka.evaluate.checker.tasks.fancy_worker",
                          "aka.evaluate.checker.tasks.read", "aka.evaluate.checker.tasks.store"}, found
    assert found["aka.evaluate.host.main._call"] == ("request handler; req: dict[str, Any], "
                                                     "return: dict[str, Any]")
    assert found["aka.evaluate.checker.tasks.fancy_worker"] == "task entry; payload: dict"
    assert found["aka.evaluate.checker.tasks.read"].startswith("json.loads; return: list[dict[str, Any]]")


def test_the_remaining_list_only_shrinks(monkeypatch):
    """An entry of REMAINING that is typed now fails the rule's test until it leaves the list."""
    monkeypatch.setitem(REMAINING, "aka.evaluate.host.main._answer", "typed since the first step")
    with pytest.raises(AssertionError, match=r"remove from REMAINING: \['aka.evaluate.host.main._answer'\]"):
        test_no_untyped_dict_crosses_a_process_boundary()
