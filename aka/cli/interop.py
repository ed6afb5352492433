"""`aka export` and `aka import`: an op to and from FlashInfer-Bench's TraceSet format."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from aka.contract.ops import get_op, project_root
from aka.errors import AkaError

FORMATS = ("flashinfer-bench",)


def _say(line: str = "") -> None:
    typer.echo(line)  # plain text: no markup to eat "[...]", no wrapping at 80 columns


def export(
    op: str = typer.Argument(..., help="operator line, e.g. gdn_prefill"),
    format_: str = typer.Option("flashinfer-bench", "--format", metavar="FORMAT",
                                help="output format (only flashinfer-bench)"),
    out: str = typer.Option(None, "--out", metavar="DIR",
                            help="TraceSet folder to write (default: runs/_export/flashinfer-bench)"),
    op_type: str = typer.Option(None, "--op-type", metavar="TYPE",
                                help="FlashInfer-Bench category, e.g. gdn (default: the op name)"),
) -> None:
    """Write the op as FlashInfer-Bench records: definition, full-set workloads, kernel, its recorded timings.

    \b
    Examples:
      aka export gdn_prefill --op-type gdn --out fib/
    """
    from aka.interop.fib_export import ExportSettings
    from aka.interop.fib_export import export as run_export

    if format_ not in FORMATS:
        raise AkaError(f"unknown format '{format_}'; use --format {' or '.join(FORMATS)}")
    the_op = get_op(op)
    dest = Path(out).resolve() if out else project_root() / "runs" / "_export" / "flashinfer-bench"
    _say(f"aka export {the_op.name}: making the full set's inputs ({the_op.spec.modules.inputs}) to read their shapes")
    r = run_export(the_op, ExportSettings(op=op, out=dest, op_type=op_type))
    d = r.files
    _say(f"wrote {r.root} (a FlashInfer-Bench TraceSet):")
    _say(f"  definition  {d['definition']}")
    _say(f"  workloads   {d['workloads']}: the {r.workloads} cases of the full set, {r.blobs} index-tensor blob(s)")
    _say(f"  solution    {d['solution']}: the {r.kernel}, {r.kernel_path}")
    if r.traces:
        _say(f"  traces      {d['traces']}: {r.traces} trace(s)")
        for m in r.measurements:
            _say(f"              from {m}")
    else:
        _say("  traces      none (see the notes)")
    _say(f"  manifest    {d['manifest']} (uuid -> case id, these notes)")
    for n in r.notes:
        _say(f"  note: {n}")
    _say(f"  {r.validation}")
    _say(f"done in {r.seconds:.1f} s")


def import_(
    definition: str = typer.Argument(..., help="a FlashInfer-Bench definition JSON"),
    workloads: str = typer.Option(None, "--workloads", metavar="FILE",
                                  help="its workloads JSONL (default: beside it in a TraceSet)"),
    out: str = typer.Option(None, "--out", metavar="PATH",
                            help="a folder for <name>.yaml, or a NAME.yaml file (the op is then NAME) "
                                 "[default: workloads/]"),
    name: str = typer.Option(None, "--name", metavar="NAME", help="op name to use instead of the definition's"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing contract"),
) -> None:
    """Draft workloads/<op>.yaml from a FlashInfer-Bench definition and its workloads (docs/interop.md).

    \b
    Examples:
      aka import fib/definitions/gdn/gdn_prefill.json --name gdn_copy
      aka import DEF.json --workloads WL.jsonl --out workloads/my_op.yaml
    """
    from aka.interop.fib_import import ImportProblems, ImportSettings, draft, write

    t0 = time.monotonic()
    settings = ImportSettings(definition=Path(definition), workloads=Path(workloads) if workloads else None,
                              out=Path(out) if out else None, force=force, name=name)
    try:
        d, dest = draft(settings, project_root())
    except ImportProblems as exc:
        for line in exc.lines:  # every field, not just the first
            typer.echo(line, err=True)
        raise
    write(d, dest, force)
    _say(f"aka import {definition} -> {dest}: {d.cases} full-set case(s) from {d.workloads_file}")
    _say(f"  drafted, marked DRAFT in the file (review them): {', '.join(d.drafted)}")
    _say(f"  not carried: {'; '.join(d.not_carried)}")
    _say(f"  {d.validation}; aka's contract loader accepts the draft")
    _say(f"  next: write kernels/{d.name}/{{reference,inputs,model,baseline}}.py, then `aka check {d.name}`")
    _say(f"done in {time.monotonic() - t0:.1f} s")
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command("export")(export)
    app.command("import")(import_)
