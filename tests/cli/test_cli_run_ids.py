"""Run ids a user can read and type (issue 40, item 1): `aka runs` never cuts an id, whatever the
width; the tables take COLUMNS also when stdout is no terminal; and a unique prefix of an id does
wherever an id does (`aka show`, `aka report`, `aka optimize --resume`).

Terminal-independent: the real entry point runs in a subprocess with stdin, stdout and stderr off any
terminal; a terminal is simulated with rich's TTY_COMPATIBLE, which makes it draw as on one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from fakes import FakeEvaluator, source
from typer.testing import CliRunner

import aka.agent.llm.base
import aka.evaluate.parent.evaluator
from aka.agent.llm.scripted import ScriptedBackend
from aka.cli.main import app
from aka.records import UnknownRunError, find_run
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.settings import Budget, OptimizeSettings

A, B = "20261203-165132-5a1b2c", "20261203-165132-5b0f3e"  # the same second: a prefix must go past it
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _make_run(project, op, run_id: str | None = None, steps: int = 1, status: str = "finished"):
    """A finished run, made as optimize makes one (FakeEvaluator), then renamed to ``run_id`` and put
    on an H200 (with an interrupted one, `aka runs` is 121 columns wide unwrapped, as in the issue)."""
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=steps), interpreter=True)
    ev = FakeEvaluator(op, timing="interpreter")
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, ScriptedBackend([{"source": source(1.1 + i / 10, str(i))} for i in range(steps)]),
             ev)
    store.close()
    if run_id is None:
        return store.path
    path = store.path.rename(store.path.with_name(run_id))
    info = json.loads((path / "run.json").read_text())
    device = {**info["device"], "name": "NVIDIA H200"}
    (path / "run.json").write_text(json.dumps({**info, "run_id": run_id, "device": device, "status": status}))
    return path


@pytest.fixture
def two_runs(project, op):
    return _make_run(project, op, A), _make_run(project, op, B, status="interrupted")


def run_aka(project, *args, columns: str | None = None, tty: bool = False):
    """The real `aka` in a subprocess, off any terminal; COLUMNS as given (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TTY_COMPATIBLE", "FORCE_COLOR")}
    env |= {"AKA_ROOT": str(project), "NO_COLOR": "1"} | ({"COLUMNS": columns} if columns else {})
    env |= {"TTY_COMPATIBLE": "1"} if tty else {}
    code = "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env=env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("columns,tty", [("80", False), (None, False), ("80", True), ("100", True),
                                         ("120", True), ("60", True)])
def test_aka_runs_prints_every_run_id_whole_at_any_width(project, two_runs, columns, tty):
    r = run_aka(project, "runs", columns=columns, tty=tty)
    assert r.returncode == 0, r.stderr
    out = ANSI.sub("", r.stdout)
    width = max(len(line) for line in out.splitlines())
    ids = re.findall(r"20261203-[0-9a-f-]+", out)
    assert sorted(ids) == [A, B], out  # each whole, on one line: no "202612…", no "20261203-165132-5…"
    assert "…" not in out, out
    if columns:  # COLUMNS is the width, terminal or not (it was 160 whenever stdout was no terminal)
        assert width <= int(columns), out
    else:  # no terminal, no COLUMNS (a log): wide enough for every column unwrapped
        assert 80 < width <= 160, out
        assert all(col in out for col in ("started", "device", "promoted")), out
    if columns == "80":  # what does not fit is left out, and the table says so
        assert "not shown at this width: started" in " ".join(out.split()), out


def test_the_tables_take_columns_when_stdout_is_no_terminal(project, two_runs):
    wide = run_aka(project, "show", A, columns="200").stdout
    narrow = run_aka(project, "show", A, columns="80").stdout
    assert max(map(len, narrow.splitlines())) <= 80 < max(map(len, wide.splitlines())), narrow


def test_find_run_takes_an_exact_id_first_then_a_unique_prefix(tmp_path):
    from aka.records import AmbiguousRunError

    for name in ("abc", "abcd", "abd9", "zz"):
        (tmp_path / "op" / name).mkdir(parents=True)
        (tmp_path / "op" / name / "run.json").write_text("{}")
    (tmp_path / "op" / "ab-no-run-json").mkdir()
    assert find_run(tmp_path, "abc").name == "abc"  # exact, though "abcd" starts with it too
    assert find_run(tmp_path, "abd").name == "abd9" and find_run(tmp_path, "z").name == "zz"
    with pytest.raises(AmbiguousRunError) as err:
        find_run(tmp_path, "ab")
    msg = str(err.value)
    assert "\n" not in msg and "run id 'ab' is ambiguous: 3 runs" in msg and "abc, abcd, abd9" in msg, msg
    for unknown in ("nope", "", "*", "a?c", "[a]bc"):  # no glob of what the user typed
        with pytest.raises(UnknownRunError, match=r"unknown run '.*'; `aka runs` lists the runs under") as err:
            find_run(tmp_path, unknown)
        assert not isinstance(err.value, AmbiguousRunError)


def test_show_and_report_take_a_unique_prefix_and_refuse_an_ambiguous_one_in_one_line(project, two_runs, tmp_path):
    shown = run_aka(project, "show", A[:18], columns="200")
    assert shown.returncode == 0, shown.stderr
    assert f"run {A} on" in shown.stdout and B not in shown.stdout
    data = json.loads(run_aka(project, "show", B[:18], "--json").stdout)
    assert data["run_id"] == B
    rep = run_aka(project, "report", A[:18], "--out", str(tmp_path / "rep"), columns="200")
    assert rep.returncode == 0 and (tmp_path / "rep" / "index.html").is_file(), rep.stdout + rep.stderr
    amb = run_aka(project, "show", A[:17], columns="200")
    assert amb.returncode != 0 and amb.stdout == ""
    assert amb.stderr.strip().count("\n") == 0 and "is ambiguous: 2 runs start with it" in amb.stderr, amb.stderr
    assert A in amb.stderr and B in amb.stderr
    unknown = run_aka(project, "show", "20251203", columns="200")
    assert unknown.returncode != 0 and "unknown run '20251203'; `aka runs` lists the runs" in unknown.stderr


def test_optimize_resume_takes_a_unique_prefix(project, op, monkeypatch):
    path = _make_run(project, op)  # where optimize made it: a resumed run reads paths under it
    backend = ScriptedBackend([{"source": source(1.2, "a")}, {"source": source(0.9, "b")}])
    monkeypatch.setattr(aka.evaluate.parent.evaluator, "RealEvaluator",
                        lambda op, settings: FakeEvaluator(op, timing="interpreter"))
    monkeypatch.setattr(aka.agent.llm.base, "get_backend", lambda name, **kw: backend)
    res = CliRunner().invoke(app, ["optimize", "--resume", path.name[:-3], "--budget", "2"],
                             env={"AKA_ROOT": str(project)})
    assert res.exit_code == 0, res.output
    assert json.loads((path / "run.json").read_text())["summary"]["attempts"] == 2
    assert f"run {path.name} " in res.stdout  # the whole id from here on


def test_resuming_a_run_killed_during_its_setup_says_to_start_a_new_one(project, op):
    path = _make_run(project, op)
    info = json.loads((path / "run.json").read_text())
    (path / "run.json").write_text(json.dumps({**info, "status": "setting up"}))  # as a SIGKILL leaves it
    res = CliRunner().invoke(app, ["optimize", "--resume", path.name], env={"AKA_ROOT": str(project)})
    assert res.exit_code != 0
    assert "stopped during its set-up" in str(res.exception) and "start a new run (aka optimize gdn_prefill)" in \
        str(res.exception)
