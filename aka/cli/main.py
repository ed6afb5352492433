"""The `aka` console script: one Typer app; each command module registers its commands."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading

import typer
from rich.console import Console
from rich.markup import escape

from aka.cli.helpfmt import AkaGroup, polish
from aka.errors import AkaError

app = typer.Typer(
    name="aka",
    help="Kernel-optimization agent orchestrator: plan, codegen, correctness gate, benchmark, promotion.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=AkaGroup,
    rich_markup_mode=None,  # help: click's plain formatter, readable at 80 columns (aka/cli/helpfmt.py)
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
polish(app)


# -- SIGTERM and SIGHUP -----------------------------------------------------------------------------
# A CI time cap or `timeout` (SIGTERM), a closed terminal or ssh session (SIGHUP): the command unwinds
# as on Ctrl-C (optimize saves its run and prints the resume hint), its workers die, in every thread,
# their folders are removed, and it exits 128 + the signal's number (143, 129; Ctrl-C stays 130)
# with one line on stderr. A repeat of the signal while stopping is ignored; past STOP_GRACE_S the
# process ends anyway.
STOP_GRACE_S = 30.0
_stop_signal: int | None = None
_raising = False  # inside the command: the first signal raises KeyboardInterrupt there
_watchdog: threading.Timer | None = None


def _on_stop_signal(signum, frame) -> None:
    global _stop_signal, _watchdog
    if _stop_signal is not None:
        return
    _stop_signal = signum
    runner = sys.modules.get("aka.evaluate.parent.runner")  # imported once a worker ran; nothing to kill before
    if runner is not None:
        runner.stop_workers()
    _watchdog = threading.Timer(STOP_GRACE_S, _finish_stop, kwargs={"forced": True})
    _watchdog.daemon = True
    _watchdog.start()
    if _raising:
        raise KeyboardInterrupt(signal.Signals(signum).name)


def _finish_stop(forced: bool = False) -> None:
    """Clean up, say what stopped the command, exit 128 + the signal's number."""
    if _watchdog is not None and not forced:
        _watchdog.cancel()
    signum = _stop_signal or signal.SIGTERM
    code = 128 + signum
    runner = sys.modules.get("aka.evaluate.parent.runner")
    if runner is not None:
        runner.remove_leftovers(wait_s=1.0 if forced else 5.0)
    name = signal.Signals(signum).name
    how = (f"it did not end within {STOP_GRACE_S:g} s and was ended by force; " if forced else "") + \
        "workers ended, temporary folders removed"
    try:  # a closed terminal (SIGHUP) takes stdout and stderr with it
        sys.stdout.flush()
        print(f"aka: stopped by {name} (exit {code}); {how}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        forced = True  # Python's own exit would fail flushing them too, and exit 120
    if forced:
        os._exit(code)
    sys.exit(code)


def main() -> None:
    """Entry point: user errors print one line and exit non-zero, never a traceback. SIGTERM and
    SIGHUP (a CI time cap, `timeout`, a closed terminal) end a command as Ctrl-C does: workers are
    killed, optimize prints its summary and resume hint and marks the run interrupted; the exit
    status is 143 or 129, and one line on stderr says so."""
    global _raising
    outcome: BaseException | None = None
    try:
        _raising = True  # first: a signal from here on stops the command
        try:
            for sig in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) != signal.SIG_IGN:  # `nohup aka ...` asked to outlive the terminal
                    signal.signal(sig, _on_stop_signal)
            app()
        finally:
            _raising = False
    except BaseException as exc:  # sorted out below, once it is known whether a signal came
        outcome = exc
    if _stop_signal is not None:
        _finish_stop()
    if isinstance(outcome, AkaError):
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(outcome))}", highlight=False, soft_wrap=True)
        sys.exit(outcome.exit_code)
    interrupted = isinstance(outcome, KeyboardInterrupt) or (isinstance(outcome, SystemExit) and outcome.code == 130)
    runner = sys.modules.get("aka.evaluate.parent.runner")
    if interrupted and runner is not None:  # Ctrl-C: the workers of other threads (optimize's) and their folders
        runner.remove_leftovers()
    if isinstance(outcome, KeyboardInterrupt):
        sys.exit(130)
    if outcome is not None:
        raise outcome
