"""`aka ops` and `aka shapes`: the operator lines and their shape sets."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from aka.ops import all_ops, get_op
from aka.spec import SHAPE_SETS

console = Console()


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.1f} {prefix}{unit}"
    return f"{x:.0f} {unit}"


def ops() -> None:
    """List the operator lines with their shape counts."""
    table = Table(title="aka operator lines")
    table.add_column("op", style="bold")
    for s in SHAPE_SETS:
        table.add_column(s, justify="right")
    table.add_column("description")
    for op in all_ops():
        table.add_row(op.name, *(str(len(op.cases(s))) for s in SHAPE_SETS), op.spec.description)
    console.print(table)


def shapes(
    op: str = typer.Argument(..., help="operator line, e.g. gdn_prefill"),
    set_: str = typer.Option("full", "--set", help="full, smoke, edge, or comma-separated shape ids"),
) -> None:
    """Show a shape set with the FLOPs and minimal bytes of each case."""
    o = get_op(op)
    cases = o.cases(set_)
    table = Table(title=f"{o.name} — {set_} ({len(cases)} shapes)")
    table.add_column("id", style="bold")
    table.add_column("parameters")
    table.add_column("FLOPs", justify="right")
    table.add_column("min bytes", justify="right")
    table.add_column("FLOP/B", justify="right")
    table.add_column("note")
    for c in cases:
        f, b = o.flops(c), o.min_bytes(c)
        table.add_row(c.id, c.describe(), _si(f, "FLOP"), _si(b, "B"), f"{f / b:.0f}", c.note)
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("ops")(ops)
    app.command("shapes")(shapes)
