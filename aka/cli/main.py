"""The `aka` console script: one Typer app; each command module registers its commands."""

from __future__ import annotations

import importlib
import signal
import sys

import typer
from rich.console import Console
from rich.markup import escape

from aka.errors import AkaError

app = typer.Typer(
    name="aka",
    help="Kernel-optimization agent orchestrator: plan, codegen, correctness gate, benchmark, promotion.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _version(value: bool) -> None:
    if value:
        from aka import __version__

        print(f"aka {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print aka's version and exit")) -> None:
    """Kernel-optimization agent orchestrator: plan, codegen, correctness gate, benchmark, promotion."""


# Command modules, each with register(app). Order is the order of `aka --help`.
COMMANDS = ("aka.cli.ops", "aka.cli.doctor", "aka.cli.check", "aka.cli.bench", "aka.cli.wiki", "aka.cli.optimize",
            "aka.cli.runs", "aka.cli.profile", "aka.cli.report", "aka.cli.regress", "aka.cli.interop")

for _name in COMMANDS:
    importlib.import_module(_name).register(app)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> None:
    """Entry point: user errors print one line and exit non-zero, never a traceback. SIGTERM and
    SIGHUP (a CI time cap, `timeout`, a closed terminal) end a command as Ctrl-C does: workers are
    killed, optimize prints its summary and resume hint and marks the run interrupted."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        app()
    except AkaError as err:
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
        sys.exit(err.exit_code)
