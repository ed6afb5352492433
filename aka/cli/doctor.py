"""`aka doctor`: what this machine can do for aka."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from aka.doctor import collect

console = Console()


def doctor(as_json: bool = typer.Option(False, "--json",
                                        help="print JSON instead of the table (its keys: see above)")) -> None:
    """Versions, the GPU (or the CPU interpreter, proven on a real kernel) and which API keys are set.

    --json: {ok, items: [{item, value, ok}]}; exit 1 when any item is not ok, as for the table.

    \b
    Examples:
      aka doctor
      aka doctor --json
    """
    report = collect()
    if as_json:
        print(json.dumps({"ok": report.ok, "items": [{"item": k, "value": v, "ok": ok} for k, v, ok in report.rows]},
                         indent=2))
        if not report.ok:
            raise typer.Exit(1)
        return
    table = Table(title="aka doctor", show_header=False)
    table.add_column("item", style="bold")
    table.add_column("value")
    for key, value, ok in report.rows:
        table.add_row(key, escape(value) if ok else f"[red]{escape(value)}[/red]")
    console.print(table)
    if not report.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
