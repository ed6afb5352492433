"""How `aka ... --help` reads: click's plain formatter, one line per option at 80 columns.

Typer's rich panels spread an option over six columns (long name, short name, negative name, type,
help), which at 80 columns leaves the help an 18-character column and cuts long flag names
(`--allow-shape-re…`). The plain formatter writes `--flag VALUE  help`, the help wrapped beside the
flag (or under it, for a long flag), never wider than 78 columns whatever the terminal, and never cuts
a name. Every command gets the classes below from `polish(app)` (aka/cli/main.py), so no command
module has to ask for them:

- an argument reads as its metavar, `OP`, `RUN`, never `{op}` or `op <str>`: usage `aka show RUN`;
- an option that takes a value shows its metavar (`--budget N`), never a type such as `<int>`; one
  without an explicit metavar gets its name in capitals; a flag (a boolean) shows none;
- a group lists each command with its whole first sentence, not a sentence cut at "...".

A command's examples are part of its docstring: an `Examples:` paragraph after `\\b` (click keeps
such a paragraph's lines as written), one command line a line.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# the widest flag column: a longer one (--competitors / --no-competitors) gets a line of its own, so the
# help beside the others is 50 columns wide at 80
COL_MAX = 24
# argument name -> what a user types there (default: the name in capitals)
ARGUMENT_METAVARS = {"run_id": "RUN", "card_id": "CARD", "definition": "DEFINITION.json"}


def _is_argument(p: Any) -> bool:
    return p.param_type_name == "argument"


def _default_metavars(params: list[Any]) -> None:
    for p in params:
        if p.metavar is not None:
            continue
        if _is_argument(p):
            p.metavar = ARGUMENT_METAVARS.get(p.name, p.name.upper())
        elif p.param_type_name == "option" and not getattr(p, "is_flag", False) and not getattr(p, "count", False):
            long = [o for o in p.opts if o.startswith("--")] or p.opts
            p.metavar = long[0].lstrip("-").replace("-", "_").upper()


def _argument_usage(p: Any) -> str:
    name = p.metavar + ("..." if p.nargs != 1 else "")
    return name if p.required else f"[{name}]"


def _write_params(cmd: Any, ctx: Any, formatter: Any) -> None:
    args, opts = [], []
    for p in cmd.get_params(ctx):
        rec = p.get_help_record(ctx)
        if rec is None:
            continue
        if _is_argument(p):  # Typer writes "op <str>" here: the metavar alone, as in the usage line
            args.append((p.metavar, rec[1]))
        else:
            opts.append(rec)
    if args:
        with formatter.section("Arguments"):
            formatter.write_dl(args, col_max=COL_MAX)
    if opts:
        with formatter.section("Options"):
            formatter.write_dl(opts, col_max=COL_MAX)


class AkaCommand(TyperCommand):
    """A leaf command, formatted as the module docstring says."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _default_metavars(self.params)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [_argument_usage(p) for p in self.get_params(ctx) if _is_argument(p)]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _write_params(self, ctx, formatter)


class AkaGroup(TyperGroup):
    """A command group (aka, aka wiki): its commands with their whole first sentence."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _default_metavars(self.params)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _write_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1 << 12)))  # the first sentence, whole
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def polish(app: typer.Typer) -> None:
    """Give every command and group of ``app`` (registered so far) the classes above."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):  # Typer's default: None in older releases, TyperCommand in newer ones
            info.cls = AkaCommand
    for group in app.registered_groups:
        group.cls = AkaGroup
        if group.typer_instance is not None:
            polish(group.typer_instance)
