"""`aka bench OP`: time implementations side by side, per shape, in one worker process."""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from aka.contract.ops import get_op
from aka.errors import AkaError
from aka.evaluate.host.bench import NOT_REPRESENTATIVE, BenchConfig, geomean
from aka.evaluate.parent import door
from aka.evaluate.parent.impls import resolve
from aka.evaluate.parent.outcomes import host_cost
from aka.evaluate.wire import BenchCell, BenchPayload, BenchRow, BenchValue, ProgressLine

console = Console()
WORKER = "aka.evaluate.checker.verify:bench_worker"
TIMEOUT_S = 1800.0  # the full set with fla autotuning every new head layout on a fresh machine: minutes


class BenchRunError(AkaError):
    """The benchmark worker failed (crash, timeout, CUDA fault); ``partial`` holds the shapes it finished."""

    def __init__(self, message: str, partial: BenchValue | None = None):
        super().__init__(message)
        self.partial = partial


class BenchUsageError(AkaError):
    """A bad `aka bench` argument."""


def run_worker(payload: BenchPayload, timeout: float, total: int | None = None,
               lines: list[ProgressLine] | None = None) -> BenchValue:
    """Run the bench in a fresh worker process: a candidate that crashes or hangs fails alone.

    With ``total`` (the number of shapes) a progress bar follows the worker, and each finished shape
    is printed as a line, so a run cut short (a CI or device time limit) still shows what it measured;
    ``lines`` (appended to as they come) keeps them for a caller that is stopped meanwhile."""
    lines = [] if lines is None else lines
    if total is None:
        res = door.run(WORKER, payload, timeout=timeout)
    else:
        res = _with_progress(payload, timeout, total, lines)
    if not res.ok:
        why = door.failure(res, "bench")
        raise BenchRunError(why, _partial(payload, lines, total, why))
    return BenchValue.model_validate(res.value)


def _partial(payload: BenchPayload, lines: list[ProgressLine], total: int | None, why: str) -> BenchValue | None:
    """The shapes a failed worker finished, as a BenchValue (None when it finished none). Pure."""
    rows = [ln.row for ln in lines if ln.row is not None]
    if not rows:
        return None
    note = (f"partial: the worker stopped after {len(rows)} of {total} shapes ({why}); these rows were not "
            "checked against float64 (the checker runs once every shape is timed)")
    return BenchValue(op=payload.op, device=lines[-1].device or "?",
                      kind="interpreter" if lines[-1].interpreter else "gpu", impls=list(rows[0].results),
                      ceilings=None, config={}, notes=[note], rows=rows)


def _with_progress(payload: BenchPayload, timeout: float, total: int, kept: list[ProgressLine]):
    with tempfile.TemporaryDirectory(prefix=f"aka-bench-{os.getpid()}-") as tmp:
        path = Path(tmp) / "progress.jsonl"
        path.touch()
        with ThreadPoolExecutor(1) as pool, Progress(
            TextColumn("[bold]bench[/bold]"), BarColumn(), TextColumn("{task.completed}/{task.total} shapes"),
            TimeElapsedColumn(), TextColumn("{task.description}"), console=console, transient=True,
        ) as bar:
            first = "starting the worker" + (", compiling the kernels first" if payload.precompile else "")
            task = bar.add_task(first, total=total)
            fut = pool.submit(door.run, WORKER, payload.model_copy(update={"progress_path": str(path)}),
                              timeout=timeout)
            seen = 0
            while True:
                finished = fut.done()  # read the file after this, so the last line is never missed
                lines = path.read_text().splitlines()
                for line in lines[seen:]:
                    rec = ProgressLine.model_validate(json.loads(line))
                    kept.append(rec)
                    graph = rec.graph_us
                    times = ", ".join(f"{n} {us:,.1f} µs" + (f" (graph {graph[n]:,.1f})" if n in graph else "")
                                      for n, us in rec.median_us.items())
                    label = f" ({NOT_REPRESENTATIVE})" if rec.interpreter else ""
                    at = f"  [{rec.elapsed_s:.0f} s]"
                    bar.console.print(f"  {rec.shape:<6} {times}{label}{at}", highlight=False, soft_wrap=True)
                    bar.update(task, completed=rec.done, description=f"last: {rec.shape}")
                seen = len(lines)
                if finished:
                    return fut.result()
                time.sleep(0.5)


def _cell_time(r: BenchCell) -> str:
    if r.skipped is not None:
        return "[dim]skipped[/dim]"
    if r.rejected:
        return "[red]rejected[/red]"
    if r.error is not None or r.eager is None:
        return "[red]error[/red]"
    e = r.eager
    text = f"{e.median_us:.1f} ±{e.iqr_us / 2:.1f}"
    if r.graph:
        text += f"\n[dim]graph {r.graph.median_us:.1f}[/dim]"
        if (h := host_cost(r)) is not None:
            text += f"\n[dim]host {h:.1f}[/dim]"
    if e.in_call_us is not None:
        text += f"\n[dim]in call {e.in_call_us:.1f}[/dim]"
    return text


def _kind(r: BenchCell | None) -> str | None:
    return r.eager.kind if r and r.eager else None


def speedups(rows: list[BenchRow], impls: list[str], basis: str = "eager") -> dict[str, list[float | None]]:
    """Per impl, per row: time of the first impl / time of this impl, eager or CUDA-graph replay times.

    None when either is missing or they were measured differently (interpreter against CPU torch).
    """
    out: dict[str, list[float | None]] = {}
    for name in impls:
        col = []
        for row in rows:
            ra, rb = row.results.get(impls[0]), row.results.get(name)
            a, b = ra and ra.median(basis), rb and rb.median(basis)
            col.append(a / b if a and b and _kind(ra) == _kind(rb) else None)
        out[name] = col
    return out


def render(result: BenchValue, basis: str = "eager") -> Table:
    """The side-by-side table: per shape, each impl's time, speedup against the first, roofline fraction."""
    impls, rows = result.impls, result.rows
    gpu = result.kind == "gpu"
    title = f"{result.op} on {result.device}" + ("" if gpu else f" — [bold red]{NOT_REPRESENTATIVE}[/bold red]")
    table = Table(title=title, caption="eager median ±IQR/2 µs; graph = CUDA-graph replay; host = the host's "
                  "cost per call (eager - graph); in call = the host's time inside the call itself; × = speedup vs "
                  f"{impls[0] if impls else '-'} ({'graph replay' if basis == 'graph' else 'eager'} times); "
                  "roof = roofline time / measured time")
    table.add_column("shape", style="bold")
    sp = speedups(rows, impls, basis)
    for name in impls:
        table.add_column(f"{name} µs", justify="right")
        table.add_column("×", justify="right")
        table.add_column("roof", justify="right")
    for i, row in enumerate(rows):
        cells = [row.shape]
        for name in impls:
            r = row.results.get(name) or BenchCell()
            frac = r.roofline_frac
            cells += [_cell_time(r), _fmt(sp[name][i], "{:.2f}"), _fmt(frac, "{:.0%}")]
        table.add_row(*cells)
    gm = ["geomean"]
    for name in impls:
        gm += ["", _fmt(geomean([x for x in sp[name] if x]), "{:.2f}"), ""]
    table.add_row(*gm, style="bold")
    return table


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else spec.format(x)


def notes(result: BenchValue, skipped: list[dict[str, str]]) -> list[str]:
    """Every skip, error and competitor note, once per implementation."""
    lines = [f"{s['name']}: skipped — {s['note']}" for s in skipped] + list(result.notes)
    seen: set[tuple[str, str]] = set()
    for row in result.rows:
        for name, r in row.results.items():
            for key in ("skipped", "error", "note", "graph_note"):
                text = getattr(r, key)
                if text and (name, text) not in seen:
                    seen.add((name, text))
                    where = "" if key in ("note", "skipped") else f" ({row.shape})"
                    lines.append(f"{name}{where}: {key.replace('_', ' ')}: {text}")
    return lines


def write_csv(result: BenchValue, path: Path) -> None:
    kind = result.kind
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["shape", "impl", "kind", "median_us", "q1_us", "q3_us", "n", "graph_us", "host_us", "tflops",
                    "tbps", "roofline_frac", "peak_extra_bytes", "status", "in_call_us", "stream_us"])
        for row in result.rows:
            for name, r in row.results.items():
                e, g = r.eager, r.graph
                status = "skipped" if r.skipped is not None else "error" if r.error is not None else "ok"
                w.writerow([row.shape, name, e.kind if e else kind, e and e.median_us, e and e.q1_us, e and e.q3_us,
                            e and e.n, g and g.median_us, host_cost(r), r.tflops, r.tbps, r.roofline_frac,
                            r.peak_extra_bytes, status, e and e.in_call_us, e and e.stream_us])


def bench(
    op: str = typer.Argument(..., help="operator line, e.g. gdn_prefill"),
    kernel: Annotated[Path | None, typer.Option("--kernel", metavar="FILE",
                                                help="a candidate kernel file (policy-checked)")] = None,
    impl: str = typer.Option("baseline,promoted", "--impl", metavar="IMPLS",
                             help="comma-separated: baseline, promoted, "
                                  "kernel, a competitor of the op (fla, flashqla, sdpa, flash_attn4), or a .py file; "
                                  "a kernel with +KEY=VALUE runs with that CONFIG value (baseline+BLOCK_N=32); "
                                  "a kernel with @graph is called through aka.graphed, CUDA graphs kept per "
                                  "argument key (baseline@graph: its eager time is one graph launch's host cost), "
                                  "@bound the same with the arguments bound once (GraphedOp.bind); "
                                  "speedups are vs the first"),
    shapes: str = typer.Option(None, "--shapes", metavar="SETS", help="full, smoke, edge, or comma-separated shape ids "
                               "[default: full; CPU: smoke]"),
    csv_path: Annotated[Path | None, typer.Option("--csv", metavar="FILE",
                                                  help="one row per shape and implementation")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", metavar="FILE",
                                                   help="the full result, all samples")] = None,
    graph: bool = typer.Option(True, "--graph/--no-graph", help="also time CUDA-graph replay"),
    speedup: str = typer.Option(None, "--speedup", metavar="TIMING", help="times the × column compares: eager or graph "
                                "(CUDA-graph replay, launch gaps removed) [default: the op's rank_timing]"),
    time_cap: float = typer.Option(None, "--time-cap", metavar="SECONDS", min=0.05,
                                   help="seconds of sampling per implementation, shape and timing kind before "
                                        "the median is taken as it stands "
                                        f"[GPU default: {BenchConfig.model_fields['time_cap_s'].default}]"),
    timeout: float = typer.Option(TIMEOUT_S, "--timeout", metavar="SECONDS",
                                  help="seconds before the worker is killed"),
    precompile: bool = typer.Option(True, "--precompile/--no-precompile",
                                    help="on a GPU, compile every Triton specialisation the kernels reach over the "
                                         "shapes first, side by side on every core (else each compiles at its "
                                         "first call, one after another)"),
) -> None:
    """Time implementations of an op side by side: per shape time, speedup and roofline fraction.

    \b
    Examples:
      aka bench gdn_prefill
      aka bench gdn_prefill --impl baseline,fla,baseline@graph --csv times.csv
      aka bench fa4_decode --impl promoted,promoted+BLOCK_N=32+num_warps=8
    """
    o = get_op(op)
    import torch

    gpu = torch.cuda.is_available()
    speedup = speedup or (o.spec.rank_timing if graph and gpu else "eager")  # the interpreter has no graphs
    if speedup not in ("eager", "graph"):
        raise BenchUsageError(f"--speedup {speedup}: use eager or graph")
    if speedup == "graph" and not graph:
        raise BenchUsageError("--speedup graph needs the graph timings: drop --no-graph")
    if shapes is None:  # the interpreter needs minutes per full-set shape: smoke unless asked
        shapes = "full" if gpu else "smoke"
        if shapes == "smoke":
            console.print("[yellow]no GPU: timing the smoke set in Triton's interpreter (--shapes full to "
                          "insist; interpreter times are not representative)[/yellow]")
    n_shapes = len(o.cases(shapes))  # a bad shape set fails here, in one line, before any process starts
    refs, skipped = resolve(o, [s.strip() for s in impl.split(",") if s.strip()], kernel)
    payload = BenchPayload(op=o.name, root=str(o.root), impls=refs, shapes=shapes, graph=False if not graph else None,
                           time_cap_s=time_cap or None,
                           precompile=(os.cpu_count() or 1) if precompile and gpu else None)
    lines: list[ProgressLine] = []
    try:
        result = run_worker(payload, timeout, total=n_shapes, lines=lines)
    except BenchRunError as exc:  # what the worker finished is printed and written before the error
        if exc.partial is not None:
            _report(exc.partial, speedup, skipped, csv_path, json_path)
        raise
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM / SIGHUP (aka.cli.main): the same, files first
        part = _partial(payload, lines, n_shapes, "stopped by Ctrl-C or a signal")
        if part is not None:
            _write(part, skipped, csv_path, json_path)
            try:  # after SIGHUP the terminal may be gone
                _report(part, speedup, skipped, None, None)
            except (OSError, ValueError):
                pass
        raise
    _report(result, speedup, skipped, csv_path, json_path)


def _report(result: BenchValue, speedup: str, skipped: list, csv_path: Path | None, json_path: Path | None) -> None:
    """The table and notes on the console, and the --csv / --json files when asked."""
    console.print(render(result, speedup))
    for line in notes(result, [s.model_dump() for s in skipped]):
        console.print(f"[dim]note[/dim] {escape(line)}", highlight=False, soft_wrap=True)
    _write(result, skipped, csv_path, json_path)


def _write(result: BenchValue, skipped: list, csv_path: Path | None, json_path: Path | None) -> None:
    """The --csv / --json files, where asked."""
    if csv_path:
        write_csv(result, csv_path)
    if json_path:
        json_path.write_text(json.dumps({**result.model_dump(), "skipped": [s.model_dump() for s in skipped]},
                                        indent=1))


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
