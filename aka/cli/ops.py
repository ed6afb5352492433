"""`aka ops` and `aka shapes`: the operator lines and their shape sets."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from aka.contract.ops import get_op, op_names
from aka.contract.spec import SHAPE_SETS
from aka.errors import AkaError, ContractError

console = Console()


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.1f} {prefix}{unit}"
    return f"{x:.0f} {unit}"


def ops() -> None:
    """List the operator lines with their shape counts; a malformed contract is named, the others listed."""
    table = Table(title="aka operator lines")
    table.add_column("op", style="bold")
    for s in SHAPE_SETS:
        table.add_column(s, justify="right")
    table.add_column("description")
    bad = []
    for name in op_names():
        try:  # one broken contract must not hide the others
            op = get_op(name)
        except ContractError as exc:
            bad.append(str(exc))
            continue
        table.add_row(op.name, *(str(len(op.cases(s))) for s in SHAPE_SETS), escape(op.spec.description))
    console.print(table)
    for err in bad:
        Console(stderr=True).print(f"[red]error:[/red] {escape(err)}", highlight=False, soft_wrap=True)
    if bad:
        raise typer.Exit(1)


def _need_cost_model(o) -> None:
    """One line naming the file, where an op drafted by `aka import` has no cost model yet."""
    rel = o.spec.modules.model
    models = sorted((o.root / "kernels").glob("*/model.py"), key=lambda p: (p.parent.name != "gdn_prefill", p))
    example = next((f"; see {p.relative_to(o.root)}" for p in models if p != o.path("model")), "")
    what = f"write the op's cost model (flops(case), min_bytes(case)){example}"
    if not o.path("model").is_file():
        raise AkaError(f"{rel} is missing: {what}")
    missing = [f for f in ("flops", "min_bytes") if not callable(getattr(o.model, f, None))]
    if missing:
        raise AkaError(f"{rel} defines no {' and no '.join(f + '()' for f in missing)}: {what}")


def shapes(
    op: str = typer.Argument(..., help="operator line, e.g. gdn_prefill"),
    set_: str = typer.Option("full", "--set", metavar="SETS", help="full, smoke, edge, or comma-separated shape ids"),
) -> None:
    """Show a shape set with the FLOPs and minimal bytes of each case.

    \b
    Examples:
      aka shapes gdn_prefill
      aka shapes fa4_decode --set edge
    """
    o = get_op(op)
    cases = o.cases(set_)
    _need_cost_model(o)
    # a narrow terminal (80 columns) has no room for a notes column: the notes follow the table,
    # whole, and a parameter longer than its column folds instead of ending in "…"
    narrow = console.width < 120
    table = Table(title=f"{o.name} — {set_} ({len(cases)} shapes)")
    table.add_column("id", style="bold", no_wrap=True)
    table.add_column("parameters", overflow="fold")
    table.add_column("FLOPs", justify="right", no_wrap=True)
    table.add_column("min bytes", justify="right", no_wrap=True)
    table.add_column("FLOP/B", justify="right", no_wrap=True)
    if not narrow:
        table.add_column("note")
    for c in cases:
        f, b = o.flops(c), o.min_bytes(c)
        row = [c.id, escape(c.describe()), _si(f, "FLOP"), _si(b, "B"), f"{f / b:.0f}"]
        table.add_row(*row, *([] if narrow else [escape(c.note)]))
    console.print(table)
    notes = Table.grid(padding=(0, 2))  # wrapped at words, under their note, not under the ids
    notes.add_column(style="bold", no_wrap=True)
    notes.add_column()
    for c in cases:
        if c.note:
            notes.add_row(c.id, escape(c.note))
    if narrow and notes.row_count:
        console.print(notes)


def register(app: typer.Typer) -> None:
    app.command("ops")(ops)
    app.command("shapes")(shapes)
