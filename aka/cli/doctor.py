"""`aka doctor`: what this machine can do for aka."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from aka.doctor import collect

console = Console()


def doctor() -> None:
    """Versions, the GPU (or the CPU interpreter, proven on a real kernel) and which API keys are set."""
    report = collect()
    table = Table(title="aka doctor", show_header=False)
    table.add_column("item", style="bold")
    table.add_column("value")
    for key, value, ok in report.rows:
        table.add_row(key, value if ok else f"[red]{value}[/red]")
    console.print(table)
    if not report.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
