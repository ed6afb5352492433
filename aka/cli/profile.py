"""`aka profile OP`: Nsight Compute summary per kernel on one shape, compile statistics, citable evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from aka.contract.ops import get_op
from aka.errors import AkaError
from aka.evaluate.parent.impls import checked_kernel
from aka.evaluate.static.compstats import INTERPRETER, CompileStats, format_table
from aka.knowledge.evidence import as_prompt, evidence_for_plan
from aka.knowledge.ncu_report import ProfileSummary
from aka.knowledge.profile import TIMEOUT_S as PROFILE_TIMEOUT_S
from aka.knowledge.profile import needs_gpu_message, run_profile

console = Console()


class ProfileShapeError(AkaError):
    """--shape must name exactly one shape case."""


def _f(x: float | None, spec: str = "{:.0f}") -> str:
    return "-" if x is None else spec.format(x)


def render(s: ProfileSummary) -> Table:
    """One row per kernel launch of the profiled call."""
    total = s.total_us or 0.0
    title = f"{s.op} {s.shape}: {Path(s.kernel_file).name}, {len(s.kernels)} launches ({s.source})"
    caption = "% of peak sustained; occ = achieved (theoretical) occupancy; bank = shared bank conflicts ld/st"
    t = Table(title=title, caption=caption)
    for col in ("kernel", "µs", "share", "DRAM", "mem", "SM", "occ", "L2 hit", "bank", "regs", "top stalls"):
        t.add_column(col, justify="left" if col in ("kernel", "top stalls") else "right")
    for k in s.kernels:
        stalls = ", ".join(f"{x.reason} {x.fraction:.0%}" for x in k.stalls)
        t.add_row(k.name, _f(k.duration_us, "{:.1f}"), _f((k.duration_us or 0) / total if total else None, "{:.0%}"),
                  _f(k.dram_throughput_pct), _f(k.memory_throughput_pct), _f(k.sm_throughput_pct),
                  f"{_f(k.achieved_occupancy_pct)} ({_f(k.theoretical_occupancy_pct)})", _f(k.l2_hit_rate_pct),
                  f"{_f(k.smem_bank_conflicts_ld)}/{_f(k.smem_bank_conflicts_st)}", _f(k.registers_per_thread),
                  stalls or "-")
    return t


def _shape(op, shape: str | None) -> str:
    if shape is None:
        return op.cases("full")[0].id  # the first full-set case: the op's headline shape
    cases = op.cases(shape)
    if len(cases) != 1:
        raise ProfileShapeError(f"--shape {shape} names {len(cases)} cases; give one shape id, e.g. {cases[0].id}")
    return cases[0].id


def profile(
    op: str = typer.Argument(..., help="operator line, e.g. gdn_prefill"),
    kernel: Annotated[Path | None, typer.Option("--kernel", metavar="FILE",
                                                help="a candidate kernel file (default: promoted, "
                                                     "else baseline)")] = None,
    shape: Annotated[str | None, typer.Option("--shape", metavar="ID",
                                              help="one shape id (default: the first full case)")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", metavar="FILE", help="write the summary as JSON")] = None,
    ncu: bool = typer.Option(True, "--ncu/--no-ncu", help="use Nsight Compute (else the torch profiler only)"),
    keep: Annotated[Path | None, typer.Option("--keep", metavar="DIR",
                                              help="keep ncu's report, CSV and logs in this folder")] = None,
    timeout: float = typer.Option(PROFILE_TIMEOUT_S, "--timeout", metavar="SECONDS",
                                  help="seconds for the worker and for ncu, each"),
) -> None:
    """Profile one shape: per-kernel duration, throughput vs peak, occupancy, stalls, L2, bank conflicts.

    \b
    Examples:
      aka profile gdn_prefill
      aka profile gdn_prefill --shape G1 --json profile.json
    """
    o = get_op(op)
    case_id = _shape(o, shape)
    path = checked_kernel(kernel, o) if kernel else o.default_kernel()
    import torch

    if not torch.cuda.is_available():
        Console(stderr=True).print(f"[red]error:[/red] {needs_gpu_message()}", highlight=False, soft_wrap=True)
        console.print(f"compile stats: {INTERPRETER}", highlight=False, soft_wrap=True)
        if json_path:
            empty = ProfileSummary(op=o.name, shape=case_id, kernel_file=str(path), source="none",
                                   compile=CompileStats(available=False, reason=INTERPRETER),
                                   notes=[needs_gpu_message()])
            json_path.write_text(empty.model_dump_json(indent=1))
        raise typer.Exit(code=2)
    summary = run_profile(o, path, case_id, timeout=timeout, workdir=keep, use_ncu=ncu)
    console.print(render(summary))
    if summary.total_us and summary.floor_us:
        console.print(f"total {summary.total_us:.1f} µs, roofline {summary.floor_us:.1f} µs "
                      f"({summary.roofline_frac:.0%} of the roofline)")
    for line in format_table(summary.compile or CompileStats(available=False, reason="not collected")):
        console.print(f"[dim]compile[/dim] {line}", highlight=False, soft_wrap=True)
    for stage, us in summary.ablations.items():
        console.print(f"[dim]ablation[/dim] {stage}: {us:.1f} µs", highlight=False)
    for line in summary.notes:
        console.print(f"[dim]note[/dim] {line}", highlight=False, soft_wrap=True)
    evidence = evidence_for_plan(summary)
    if evidence:
        console.print("evidence a plan can cite:\n" + as_prompt(evidence), highlight=False, soft_wrap=True)
    if json_path:
        json_path.write_text(summary.model_dump_json(indent=1))


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)
