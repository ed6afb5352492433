"""`aka regress`: re-check the promoted kernels (gate, then timing against recorded numbers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console

from aka.contract.ops import all_ops, get_op, project_root
from aka.evaluate.wire import TIMEOUT_S as GATE_TIMEOUT_S
from aka.report.regress import GATE_ROUNDS, RegressError, parse_threshold

console = Console()


def regress(
    ops: str = typer.Option("all", "--ops", metavar="OPS", help="all, or a comma-separated list of ops"),
    threshold: str = typer.Option("5%", "--threshold", metavar="SLOWDOWN",
                                  help="slowdown tolerated per shape, e.g. 5% or 0.05"),
    junit: str = typer.Option(None, "--junit", metavar="FILE",
                              help="write JUnit XML here (one testcase per op x shape x check)"),
    json_out: str = typer.Option(None, "--json", metavar="FILE", help="write the full outcome as JSON here"),
    rounds: int = typer.Option(GATE_ROUNDS, "--gate-rounds", metavar="N", min=1,
                               help="gate rounds per shape (fresh inputs each)"),
    no_record: bool = typer.Option(False, "--no-record", help="on a new device model, do not write promoted.json"),
    timeout: float = typer.Option(GATE_TIMEOUT_S, "--timeout", metavar="SECONDS", help="seconds per worker call"),
) -> None:
    """Exit 0 when every op holds, 1 on a correctness failure, 2 on a performance regression.

    \b
    Examples:
      aka regress
      aka regress --ops gdn_prefill --threshold 5% --junit regress.xml
    """
    from aka.report.junit import write_junit
    from aka.report.regress import WorkerMeasurer, run_regress

    th = parse_threshold(threshold)
    root = project_root()
    names = [x.strip() for x in ops.split(",") if x.strip()]
    if not names:
        raise RegressError("--ops is empty; use all or e.g. gdn_prefill,fa4_decode")
    the_ops = all_ops(root) if names == ["all"] else [get_op(n, root) for n in names]
    m = WorkerMeasurer(timeout_s=timeout, rounds=rounds)
    device = m.device()
    console.print(f"aka regress on {device['name']}: {', '.join(o.name for o in the_ops)}; threshold {th:.1%}",
                  highlight=False)
    outcome, changed = run_regress(the_ops, m, th, record=not no_record)
    if junit:
        write_junit(Path(junit), outcome, device["name"])
    if json_out:
        path = Path(json_out)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {**outcome.model_dump(), "device": device, "changed": [str(p) for p in changed]}
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    style = {0: "green", 1: "red", 2: "yellow"}[outcome.exit_code]
    console.print(f"[{style}]{outcome.summary()}[/{style}]", highlight=False, soft_wrap=True)
    sys.exit(outcome.exit_code)


def register(app: typer.Typer) -> None:
    app.command("regress")(regress)
