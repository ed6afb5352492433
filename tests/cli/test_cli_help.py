"""Every command's --help at 80 columns (issue 40 point 8): nothing wider than 80, every option named whole
beside a help column wide enough to read, the metavars a user types (OP, RUN, N; none for a flag), and
examples that are real command lines. Off a terminal, with COLUMNS=80 and with COLUMNS unset."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from aka.cli.main import app
from aka.contract.ops import op_names

# the commands a newcomer starts with: each shows examples
MAIN = ("optimize", "check", "bench", "show", "runs", "regress", "report", "import", "export", "shapes", "hw")
TYPE_NAMES = re.compile(r"<(str|int|float|bool|path|text|integer|int range|float range|list\[str\])>|\{[a-z_]+\}",
                        re.IGNORECASE)


def _walk(cmd, path):
    yield path, cmd
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        yield from _walk(sub, [*path, name])


ROOT = typer.main.get_command(app)
COMMANDS = list(_walk(ROOT, []))
LEAVES = {" ".join(path): cmd for path, cmd in COMMANDS if not getattr(cmd, "commands", None)}


def _help(path: list[str], columns: str | None) -> str:
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": columns})
    assert res.exit_code == 0, res.output
    return res.stdout


def _rows(text: str) -> list[tuple[str, int]]:
    """(flag column, where its help starts, 0 for a flag on a line of its own) of each option row."""
    rows, section = [], ""
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line
        elif section == "Options:" and line.startswith("  -"):
            m = re.match(r"  (\S.*?)(?:\s{2,}(\S.*))?$", line)
            rows.append((m.group(1), m.start(2) if m.group(2) else 0))
    return rows


def _options(cmd) -> list:
    return [p for p in cmd.params if p.param_type_name == "option"]


@pytest.mark.parametrize("columns", ["80", None])
def test_every_help_fits_80_columns_and_names_every_option_whole(columns):
    assert len(COMMANDS) > 20  # the walk found the tree: aka, its commands and wiki's
    for path, cmd in COMMANDS:
        text = _help(path, columns)
        where = " ".join(["aka", *path, "--help"])
        assert max(len(line) for line in text.splitlines()) <= 80, where
        assert "…" not in text, where
        flags = {f for flag_col, _ in _rows(text) for f in re.findall(r"--?[a-z][\w-]*", flag_col)}
        for p in _options(cmd):
            for name in (*p.opts, *p.secondary_opts):
                assert name in flags, f"{where}: {name} is not shown whole in the flag column"
        for flag_col, help_at in _rows(text):
            assert help_at == 0 or help_at <= 30, f"{where}: the help beside {flag_col} starts at {help_at}"


def test_optimize_help_is_short():
    text = _help(["optimize"], "80")
    assert len(text.splitlines()) < 100
    # a flag longer than the flag column goes on a line of its own, its help under it at the same column
    assert "  --competitors / --no-competitors\n" in text and "  --allow-shape-regression  accept shapes slower" in text


@pytest.mark.parametrize("columns", ["80", None])
def test_metavars_are_what_a_user_types(columns):
    for path, cmd in COMMANDS:
        text = _help(path, columns)
        where = " ".join(["aka", *path, "--help"])
        assert not TYPE_NAMES.search(text), f"{where}: {TYPE_NAMES.search(text).group()}"
        usage = text.split("\n\n")[0]
        for p in cmd.params:
            if p.param_type_name == "argument":
                want = {"op": "OP", "run_id": "RUN"}.get(p.name, p.metavar)
                assert p.metavar == want and re.search(rf"\s\[?{re.escape(want)}\]?(\s|$)", usage), (where, usage)
        rows = dict(_rows(text))
        for p in _options(cmd):
            flag_col = next(f for f in rows if p.opts[0] in re.findall(r"--?[a-z][\w-]*", f))
            if p.is_flag:  # a boolean: the flag alone, no <bool>
                assert flag_col == " / ".join([*p.opts, *p.secondary_opts]), (where, flag_col)
            else:
                assert re.fullmatch(rf"{re.escape(p.opts[0])} [A-Z][A-Z0-9_.]*", flag_col), (where, flag_col)
    assert "aka optimize [OPTIONS] [OP]" in _help(["optimize"], columns)
    assert "aka show [OPTIONS] RUN" in _help(["show"], columns)
    assert re.search(r"--resume RUN\s", _help(["optimize"], columns))


def _examples(text: str) -> list[str]:
    block = text.split("Examples:\n", 1)[1] if "Examples:\n" in text else ""
    lines = []
    for line in block.splitlines():
        if not line.startswith("    aka "):
            break
        lines.append(line.strip())
    return lines


def test_the_main_commands_show_examples_that_parse():
    shown = {}
    for path, _ in COMMANDS:
        examples = _examples(_help(path, "80"))
        if path and path[0] in MAIN:
            assert 1 <= len(examples) <= 3, f"aka {' '.join(path)} --help has no examples"
        if examples:
            shown[" ".join(path)] = examples
    assert set(MAIN) <= set(shown)
    for name, examples in shown.items():
        for line in examples:
            words = shlex.split(line)
            assert words[0] == "aka"
            path, rest = [], words[1:]
            while rest and " ".join([*path, rest[0]]) in {" ".join(p) for p, _ in COMMANDS}:
                path.append(rest.pop(0))
            assert " ".join(path) == name, f"{line!r} is not an example of aka {name}"
            # parsed as aka would parse it: every option exists and every value has its type
            ctx = LEAVES[name].make_context(f"aka {name}", rest)
            if ctx.params.get("op") is not None:
                assert ctx.params["op"] in op_names(), line


def test_optimize_reads_its_defaults_and_help_from_the_settings():
    """Each default stated once (issue 41): the options that set a settings field take its default and
    description from the model, so changing one there changes `aka optimize --help` and the run."""
    import typer.main

    from aka.cli.main import app
    from aka.config import LLMSettings
    from aka.settings import OptimizeSettings, PromotionRules

    cmd = typer.main.get_command(app).commands["optimize"]
    params = {p.name: p for p in cmd.params}
    fields = {"min_gain": (PromotionRules, "min_gain"), "margin": (PromotionRules, "shape_margin"),
              "allow_regression": (PromotionRules, "allow_shape_regression"),
              "backend": (OptimizeSettings, "backend"), "seed": (OptimizeSettings, "seed"),
              "gate_rounds": (OptimizeSettings, "gate_rounds"), "competitors": (OptimizeSettings, "competitors"),
              "profile": (OptimizeSettings, "profile"), "repairs": (LLMSettings, "repairs"),
              "lang": (LLMSettings, "lang"), "max_tool_calls": (LLMSettings, "max_tool_calls")}
    for param, (model, name) in fields.items():
        field = model.model_fields[name]
        assert params[param].default == field.default, param
        assert params[param].help == field.description, param
    assert params["cpu_gate"].default == ",".join(OptimizeSettings.model_fields["cpu_gate_sets"].default_factory())


def test_no_cli_option_states_a_number_of_its_own():
    """Each default stated once (issue 41): a number an option defaults to, or that its help calls the
    default, comes from a named constant or a settings field, never a literal in aka/cli/."""
    import ast

    cli = Path(__file__).resolve().parents[2] / "aka" / "cli"
    found = []
    for path in sorted(cli.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("Option", "Argument"):
                first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "default"),
                                                             None)
                if isinstance(first, ast.Constant) and type(first.value) in (int, float):
                    found.append(f"{path.name}:{node.lineno}: default {first.value!r}")
            if isinstance(node, ast.arguments):  # Annotated[..., typer.Option(...)] = default
                for arg, default in zip(node.args[len(node.args) - len(node.defaults):], node.defaults):
                    if isinstance(default, ast.Constant) and type(default.value) in (int, float) \
                            and "typer" in ast.unparse(arg.annotation or ast.Constant(None)):
                        found.append(f"{path.name}:{default.lineno}: {arg.arg} = {default.value!r}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.search(r"default:? [0-9]", node.value):
                found.append(f"{path.name}:{node.lineno}: help states {node.value!r}")
    assert not found, found
