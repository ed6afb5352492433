"""`aka report RUN [--out DIR]` and `aka report --op OP`: parse, wire, print."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from aka.contract.ops import get_op, project_root
from aka.errors import AkaError
from aka.records import find_run

console = Console()


class ReportUsageError(AkaError):
    """Neither or both of RUN and --op."""


def report(
    run_id: str = typer.Argument(None, help="a run id from `aka runs`"),
    op: str = typer.Option(None, "--op", metavar="OP", help="show this op's promotion history across runs instead"),
    out: str = typer.Option(None, "--out", metavar="DIR",
                            help="folder for index.html and the PNGs [default: inside runs/]"),
) -> None:
    """Write an HTML report (figures, attempts, diff) of a run, or of an op's promotion history.

    \b
    Examples:
      aka report RUN
      aka report --op gdn_prefill --out history/
    """
    from aka.report.html import write_op_report, write_run_report

    if bool(run_id) == bool(op):
        raise ReportUsageError("give a run id (`aka runs` lists them) or --op OP, not both")
    root = project_root()
    if op:
        the_op = get_op(op)
        dest = Path(out) if out else root / "runs" / the_op.name / "_history"
        page, rows, note = write_op_report(root, the_op.name, dest)
        console.print(note or f"{op}: {len(rows)} promotions", highlight=False)
    else:
        run_dir = find_run(root / "runs", run_id)
        page = write_run_report(run_dir, Path(out) if out else run_dir / "report")
    console.print(f"report: {page}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("report")(report)
