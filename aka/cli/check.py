"""`aka check`: run the correctness gate on one kernel and print a per-shape table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from aka.contract.ops import get_op
from aka.errors import AkaError
from aka.evaluate.checker.gate import MIN_CALLS, WARM_CALLS
from aka.evaluate.parent.check import check_kernel
from aka.evaluate.wire import DEFAULT_ROUNDS, TIMEOUT_S, GateReport

console = Console()


class CheckUsageError(AkaError):
    """A bad `aka check` argument."""


def check(
    op: Annotated[str, typer.Argument(help="operator line, e.g. gdn_prefill")],
    kernel: Annotated[Path | None, typer.Option("--kernel", metavar="FILE",
                                                help="candidate .py file (default: promoted, "
                                                     "else baseline)")] = None,
    shapes: Annotated[str, typer.Option("--shapes", metavar="SETS",
                                        help="smoke, edge, full or shape ids, comma-separated; "
                                             "auto = smoke+edge, plus full on a GPU")] = "auto",
    rounds: Annotated[int, typer.Option("--rounds", metavar="N",
                                        help="fresh-input rounds per shape (>= 2)")] = DEFAULT_ROUNDS,
    timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS",
                                           help="seconds before the worker is killed")] = TIMEOUT_S,
    json_path: Annotated[Path | None, typer.Option("--json", metavar="FILE",
                                                   help="also write the full report as JSON")] = None,
) -> None:
    """Check a kernel against the float64 reference in an isolated worker; exit 0 only if all passes.

    After a pass it says which kernels and compile-time specialisations of the full set the checked
    shapes never compile (aka.evaluate.host.coverage).

    \b
    Examples:
      aka check gdn_prefill
      aka check gdn_prefill --kernel my_kernel.py --shapes smoke
    """
    o = get_op(op)
    if rounds < MIN_CALLS:
        raise CheckUsageError(f"--rounds {rounds}: use at least {MIN_CALLS} (the cached-result check needs two "
                              "calls; a warm repeat of the last one follows)")
    path = kernel or o.default_kernel()
    if not path.is_file():
        raise CheckUsageError(f"{path}: no such kernel file; pass an existing .py file to --kernel")
    if shapes != "auto":
        for tok in shapes.split(","):
            o.cases(tok.strip())  # unknown names fail here with the contract's one-line error
    with console.status(f"checking {path} on {o.name} ({shapes})"):
        report = check_kernel(o, path, shapes=shapes, rounds=rounds, timeout=timeout, coverage=True)
    print_report(report, o.spec.output_names())
    if json_path:
        json_path.write_text(report.model_dump_json(indent=2))
    if not report.passed:
        raise typer.Exit(1)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2e}"


def print_report(report: GateReport, outputs: list[str]) -> None:
    table = Table(title=escape(f"{report.op} gate: {report.kernel}  [{report.device or 'no device'}]"))
    for col, just in (("shape", "left"), ("output", "left"), ("rel L2", "right"), ("max elem", "right"),
                      ("plain rel L2", "right"), ("result", "left"), ("reason", "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for res in report.results:
        for name in outputs:
            w = res.worst(name)
            ok = w is not None and w.ok
            mark = "[green]pass[/green]" if ok else "[red]FAIL[/red]"
            why = (w.reason if w and not w.ok else "") or ("" if res.passed or w else res.reason)
            table.add_row(res.id, name, _fmt(w and w.rel_l2), _fmt(w and w.max_abs_rel),
                          _fmt(w and w.plain_rel_l2), mark, escape(why))
    if report.results:
        console.print(table)
    failed = f"[red]FAILED[/red] ({report.stage}): {escape(report.reason)}"
    verdict = "[green]PASSED[/green]" if report.passed else failed
    rounds = f"{report.n_rounds - WARM_CALLS} rounds + {WARM_CALLS} warm call" if report.n_rounds else "no rounds"
    console.print(f"{verdict}  {report.summary if report.passed else ''}  {rounds}, "
                  f"{report.duration_s:.1f} s", highlight=False, soft_wrap=True)
    for line in report.coverage:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if not report.passed and report.stage in ("crash", "timeout", "oom", "device-fault", "import", "run"):
        console.print(report.stderr_tail[-1500:], markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("check")(check)
