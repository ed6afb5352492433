"""`aka runs`, `aka show`, `aka history`, `aka rollback`, and the run summary optimize prints at its end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table

from aka.cli.show_attempt import ATTEMPT_HELP, show_attempt
from aka.contract.ops import get_op, project_root
from aka.errors import AkaError
from aka.records import Attempt, RunRecord, find_run, read_attempts, read_run_record
from aka.run import gitops
from aka.run.store import list_runs
from aka.settings import OptimizeSettings

LOG_WIDTH = 160


class TableConsole(Console):
    """rich's Console with one difference: where stdout is no terminal and COLUMNS is unset (a log: a
    device run, CI) it is LOG_WIDTH wide, so the tables do not wrap. COLUMNS, when set, always wins.
    Both are read at each print, not when the module is imported."""

    def __init__(self, **kw):
        super().__init__(**kw)
        if kw.get("width") is None:
            self._width = None  # rich froze COLUMNS here; size reads it at each print instead

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is None and not self.is_terminal and not self._environ.get("COLUMNS", "").isdigit():
            return ConsoleDimensions(LOG_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


console = TableConsole()


def ratio_text(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def clip(text: str, n: int) -> str:
    """At most n characters, cut at a word boundary (a cut word reads as a different word)."""
    if len(text) <= n:
        return text
    cut = text[: n - 1]
    if " " in cut[n // 2:]:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:(") + "…"


def attempt_row(rec: Attempt, plan_width: int = 64, reason_width: int = 120) -> list[str]:
    plan = rec.plan
    change = (", ".join(plan.cited_evidence) or plan.hypothesis) if plan else ""
    what = (f"{plan.pattern}: " if plan and plan.pattern else "") + change
    stage = rec.failed_stage or ("bench" if rec.bench else "")
    verdict, reason = (rec.decision.verdict, rec.decision.reason) if rec.decision else ("?", "")
    style = {"promoted": "green", "rejected": "red"}.get(verdict, "yellow")
    vs_inc = rec.bench.vs_incumbent if rec.bench else None
    return [str(rec.n), escape(clip(what, plan_width)), stage or "done", ratio_text(rec.score), ratio_text(vs_inc),
            f"[{style}]{escape(clip(reason, reason_width))}[/{style}]"]


def attempts_table(attempts: list[Attempt], title: str) -> Table:
    t = Table(title=title, expand=False)
    for col, j in (("#", "right"), ("plan", "left"), ("stopped at", "left"), ("vs baseline", "right"),
                   ("vs incumbent", "right"), ("decision", "left")):
        t.add_column(col, justify=j)
    for rec in attempts:
        t.add_row(*attempt_row(rec))
    return t


def cpu_note(settings: OptimizeSettings) -> str:
    return (f"Triton CPU interpreter; gate on {'+'.join(settings.cpu_gate_sets)} shapes, "
            f"{settings.cpu_gate_rounds} rounds (GPU: smoke+edge then full, {settings.gate_rounds} rounds); "
            "timings not representative; nothing is promoted")


def settings_text(s: OptimizeSettings) -> str:
    """What `aka show` promises: the settings the run was started with (and resumes with)."""
    b, r = s.budget, s.rules
    stops = [f"{b.max_candidates} candidates"] + [f"{k} {v}" for k, v in (
        ("max time", f"{b.max_time_s:.0f} s" if b.max_time_s else None), ("max tokens", b.max_tokens),
        ("patience", b.patience)) if v]
    model = f", model {s.llm.model}" if s.llm.model else ""
    url = f", endpoint {s.llm.base_url}" if s.llm.base_url else ""
    return (f"settings: backend {s.backend}{model}{url}; stop at {', '.join(stops)}; promote above "
            f"{r.min_gain:.1%} geomean gain, per-shape margin {r.shape_margin:.0%}"
            + (" (regressions allowed)" if r.allow_shape_regression else "")
            + f"; gate rounds {s.cpu_gate_rounds if s.interpreter else s.gate_rounds}; seed {s.seed}; "
            f"{'commit' if s.commit else 'no commit'}; prepare ahead {s.prepare_ahead}")


def _standing(run: RunRecord, attempts: list[Attempt], summary: dict[str, Any]) -> tuple[Any, str]:
    """Best score and incumbent from the log when the run recorded no summary (killed, crashed, older runs)."""
    scores = [a.score for a in attempts if a.score is not None]
    best = summary["best_score"] if "best_score" in summary else max(scores, default=None)
    promoted = [a for a in attempts if a.promoted]
    label = f"candidate {promoted[-1].n}" if promoted else run.incumbent.label
    return best, summary.get("incumbent") or label


def _stopped(run: RunRecord, summary: dict[str, Any]) -> str:
    if summary.get("stop_reason"):
        return summary["stop_reason"]
    return f"{run.status} ({run.error})" if run.error else run.status


def workers_line(run: RunRecord) -> str:
    """A Ray run's workers: how many, on what, where, and the ones lost."""
    ws, events = run.workers, run.worker_events
    kinds = sorted({w["name"] for w in ws})
    nodes = sorted({w.get("node", "?") for w in ws})
    text = (f"measured on {len(ws)} Ray worker{'s' if len(ws) != 1 else ''} ({', '.join(kinds)}; "
            f"{len(nodes)} node{'s' if len(nodes) != 1 else ''})")
    if events:
        text += f"; {len(events)} worker(s) lost, candidates " + ", ".join(
            f"{e['candidate']} ({'measured again' if e.get('requeued') else 'left for resume'})" for e in events)
    return text


def print_summary(run_dir: Path, summary: dict[str, Any] | None = None, show_settings: bool = False) -> None:
    run = read_run_record(run_dir)
    attempts = read_attempts(run_dir)
    summary = summary or run.summary
    console.print(attempts_table(attempts, f"{run.op} run {run.run_id} on {run.device.name or '?'}"))
    base = run.baseline
    timing = base.timing or "?"
    best, incumbent = _standing(run, attempts, summary)
    lines = [
        f"shapes timed: {base.shapes} ({timing} timings"
        + (", not representative)" if timing != "gpu" else
           ", ranked on CUDA-graph replay)" if base.rank_timing == "graph" else ")"),
        "baseline: " + ", ".join(f"{s} {t:.0f} µs" for s, t in base.baseline_us.items()),
        *host_lines(run),
        *pace_lines(run, attempts),
        f"stopped: {escape(_stopped(run, summary))}; {len(attempts)} attempts, "
        f"{summary.get('elapsed_s', round(run.setup_s + sum(a.duration_s for a in attempts)))} s, "
        f"{summary.get('tokens', sum(a.tokens for a in attempts))} tokens{usage_text(attempts)}",
        f"best candidate vs baseline: {ratio_text(best)}; incumbent now: {incumbent}",
    ]
    settings = OptimizeSettings.model_validate(run.settings)
    if show_settings:
        lines.insert(0, escape(settings_text(settings)))
    if settings.interpreter:
        lines.insert(0, cpu_note(settings))
    g = base.incumbent_gate
    if g is not None and not g.ok:
        lines.append(f"[red]the incumbent itself fails the gate on {'+'.join(g.sets)}: "
                     f"{escape(g.error[:160])}; candidates sharing its numerics cannot pass "
                     "(check the kernel or the tolerances)[/red]")
    for p in run.promotions:
        lines.append(f"promoted attempt {p.n}" + (f" in commit {p.commit[:10]}" if p.commit else
                                                 " (written, not committed)"))
    if not run.promotions:
        lines.append(f"nothing promoted: {escape(_tally(attempts))}")
    if run.workers:
        lines.append(escape(workers_line(run)))
    lines += [escape(x) for x in llm_lines(attempts, calls=show_settings)]
    console.print(Panel("\n".join(lines), title="summary"))


def host_lines(run: RunRecord) -> list[str]:
    """The incumbent's host cost per call (eager minus graph replay) beside its target: a figure of its
    own, never part of the ranking."""
    host = run.baseline.incumbent_host_us
    if not host:
        return []
    try:
        target = get_op(run.op).spec.host_target_us
    except AkaError:
        target = None
    over = [s for s, h in host.items() if target is not None and h > target]
    verdict = "" if target is None else (f" (target <= {target:g} µs: over on {', '.join(over)})" if over
                                         else f" (target <= {target:g} µs: met)")
    return ["incumbent host cost per call (eager - graph): "
            + ", ".join(f"{s} {h:.0f}" for s, h in host.items()) + f" µs{verdict}"]


def pace_lines(run: RunRecord, attempts: list[Attempt]) -> list[str]:
    """How long the set-up and the candidates took: the first finished candidate after the start (of the
    command, for runs set up by `aka optimize`), and the median wall time per candidate (time since the
    previous record)."""
    if not attempts:
        return [f"set-up {run.setup_s:.0f} s, no candidate finished"]
    import statistics

    first = run.setup_s + attempts[0].duration_s
    med = statistics.median(a.duration_s for a in attempts)
    return [f"set-up {run.setup_s:.0f} s; first candidate finished {first:.0f} s after the start; "
            f"median {med:.1f} s per candidate over {len(attempts)}"]


def _k(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else f"{n:,}"


def tokens_text(u: dict[str, Any]) -> str:
    """'12.3k in (1,200 uncached), 310 out, ~$0.0123' of one usage record."""
    inp, cached = u.get("input_tokens", 0) or 0, u.get("cached_tokens", 0) or 0
    cost = u.get("cost_usd")
    return (f"{_k(inp)} in ({_k(max(inp - cached, 0))} uncached), {_k(u.get('output_tokens', 0) or 0)} out"
            + (f", ~${cost:.4f}" if cost is not None else ""))


def llm_lines(attempts: list[Attempt], calls: bool = False) -> list[str]:
    """Per attempt that asked a model: its tokens and cost, the tools it called; with ``calls`` (aka
    show) one line per tool call with its share of the tokens of the model turn that made it."""
    out = []
    for a in attempts:
        u = a.usage.model_dump()
        if not (a.usage.input_tokens or a.usage.output_tokens):
            continue
        tc = a.tool_calls
        names = ", ".join(c["name"] + ("" if c.get("ok") else " (error)") for c in tc)
        out.append(f"#{a.n} LLM: {tokens_text(u)}; {len(a.llm_calls)} calls"
                   + (f"; tools: {clip(names, 90)}" if tc else ""))
        if calls:
            for c in tc:
                out.append(f"    {c['n']:>2}. {c['name']}({clip(c.get('arguments', ''), 40)}) "
                           f"{'ok' if c.get('ok') else 'error'}, {c.get('seconds', 0):.1f} s, "
                           f"{tokens_text(c.get('usage') or {})}: {clip(' '.join(c.get('result', '').split()), 70)}")
    return out


def usage_text(attempts: list[Attempt]) -> str:
    """' (1,200 in, 300 out, 800 cached; ~$0.01)' summed over the attempts' recorded usage."""
    tot = {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0}
    cost = None
    for a in attempts:
        for k in tot:
            tot[k] += getattr(a.usage, k)
        if a.usage.cost_usd is not None:
            cost = (cost or 0.0) + a.usage.cost_usd
    if not any(tot.values()):
        return ""
    money = f"; ~${cost:.2f}" if cost is not None else "; no price for this model"
    return (f" ({tot['input_tokens']:,} in, {tot['output_tokens']:,} out, {tot['cached_tokens']:,} cached"
            f"{money})")


def _tally(attempts: list[Attempt]) -> str:
    """'2 x gate, 1 x interpreter timings cannot promote': why attempts ended, most common first."""
    from collections import Counter

    why = Counter(a.failed_stage or (a.decision.reason if a.decision else "?").removeprefix("not promoted: ")
                  for a in attempts)
    return ", ".join(f"{k} x {n}" if n > 1 else k for k, n in why.most_common()) or "no attempts"


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


JSON_HELP = "print JSON instead of the table (its keys: see above)"


def runs(op: str = typer.Argument(None, help="only this op"),
         as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List optimisation runs, newest first.

    --json: a list of {run_id, op, started, status, attempts, budget, best, promoted, device}; best is
    the best attempt's geomean speedup over the baseline, null when no attempt was timed.

    \b
    Examples:
      aka runs
      aka runs gdn_prefill --json
    """
    rows = list_runs(project_root() / "runs", op)
    if as_json:
        return _print_json(rows)
    console.print(runs_table(rows, console))


RUNS_COLUMNS = ("run", "op", "started", "status", "attempts", "best", "promoted", "device")
OPTIONAL_COLUMNS = ("started", "device", "promoted")  # left out in this order where the table would not fit


def runs_table(rows: list[dict[str, Any]], con: Console) -> Table:
    """The `aka runs` table, as wide as ``con``. A run id is never cut: `aka show`, `aka report` and
    `aka optimize --resume` need it typed (or a unique prefix of it). Where the table would not fit,
    it leaves out the started time (the id begins with it, in UTC), the device and the promotions, in this
    order, and says so; what still does not fit wraps."""
    left_out: list[str] = []
    while True:
        t = _runs_table(rows, [c for c in RUNS_COLUMNS if c not in left_out], left_out)
        if len(left_out) == len(OPTIONAL_COLUMNS) or _natural_width(con, t) <= con.width:
            return t
        left_out.append(OPTIONAL_COLUMNS[len(left_out)])


def _natural_width(con: Console, t: Table) -> int:
    """The width ``t`` takes unwrapped (rich clips a measurement to the console's width)."""
    return Measurement.get(con, con.options.update_width(1 << 16), t).maximum


def _runs_table(rows: list[dict[str, Any]], cols: list[str], left_out: list[str]) -> Table:
    caption = f"not shown at this width: {', '.join(left_out)} (see --json)" if left_out else None
    t = Table(title="aka runs", caption=caption)
    id_width = max((len(r["run_id"]) for r in rows), default=0)
    for col in cols:
        if col == "run":
            t.add_column(col, no_wrap=True, min_width=id_width)
        else:
            t.add_column(col, overflow="fold")
    for r in rows:
        cells = {"run": r["run_id"], "op": r["op"], "started": r["started"], "status": r["status"],
                 "attempts": f"{r['attempts']}/{r['budget']}", "best": ratio_text(r["best"]),
                 "promoted": str(r["promoted"]), "device": r["device"]}
        t.add_row(*(escape(str(cells[c])) for c in cols))
    return t


def show_json(run_dir: Path) -> dict[str, Any]:
    run = read_run_record(run_dir)
    attempts = read_attempts(run_dir)
    summary = run.summary
    best, incumbent = _standing(run, attempts, summary)
    stored = run.model_dump(mode="json", exclude_unset=True)  # as run.json holds it
    base = stored.get("baseline") or {}
    return {
        "run_id": run.run_id, "op": run.op, "status": stored.get("status"), "started": stored.get("started"),
        "device": stored.get("device"), "settings": stored.get("settings"),
        "baseline": {k: base.get(k) for k in ("timing", "shapes", "baseline_us", "incumbent_us")},
        "stopped": _stopped(run, summary), "fault": summary.get("fault"), "best_score": best,
        "incumbent": incumbent, "promotions": stored.get("promotions", []),
        "attempts": [{"n": a.n, "stage": a.failed_stage or ("bench" if a.bench else "done"),
                      "plan": a.plan.model_dump() if a.plan else None, "vs_baseline": a.score,
                      "vs_incumbent": a.bench.vs_incumbent if a.bench else None, "tokens": a.tokens,
                      "usage": a.usage.model_dump(), "llm_calls": a.llm_calls, "tool_calls": a.tool_calls,
                      "verdict": a.decision.verdict if a.decision else "?",
                      "reason": a.decision.reason if a.decision else ""} for a in attempts],
    }


def show(run_id: str = typer.Argument(..., help="a run id from `aka runs` (a unique prefix will do)"),
         as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
         attempt: int = typer.Option(None, "--attempt", metavar="N", help=ATTEMPT_HELP)) -> None:
    """Show one run: settings, baseline, every attempt with its decision.

    --json: {run_id, op, status, started, device, settings, baseline {timing, shapes, baseline_us,
    incumbent_us}, stopped, fault, best_score, incumbent, promotions [{n, commit}], attempts [{n, stage,
    plan, vs_baseline, vs_incumbent, tokens, usage, llm_calls, tool_calls, verdict, reason}]}; fault is
    null unless an LLM endpoint stopped the run ({kind, error, resumable, fix}); usage: {input_tokens,
    output_tokens, cached_tokens, cache_write_tokens, cost_usd}; llm_calls: one per model call {stage,
    the usage fields, tool_calls}; tool_calls: {n, name, arguments, ok, result, seconds, turn, usage}.

    \b
    Examples:
      aka show RUN
      aka show RUN --attempt 2
    """
    if attempt is not None:
        return show_attempt(run_id, attempt)
    run_dir = find_run(project_root() / "runs", run_id)
    if as_json:
        return _print_json(show_json(run_dir))
    print_summary(run_dir, show_settings=True)


def history(op: str = typer.Argument(..., help="operator line"),
            as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List the promotions of an op (git history of kernels/<op>/promoted.py), newest first.

    vs previous: the ABBA speedup over the kernel it replaced; vs baseline: those chained since the
    baseline (aka.run.standing). --json: a list of {rev, date, run_id, attempt, vs_previous, vs_baseline,
    device, subject}.

    \b
    Examples:
      aka history gdn_prefill --json
    """
    from aka.report.tables import rows_from

    the_op = get_op(op)
    rows = rows_from(gitops.history(the_op.root, op)[::-1])[::-1]  # not a repository: a one-line error
    if as_json:
        return _print_json([{"rev": p.rev, "date": p.date, "run_id": p.run_id, "attempt": p.attempt,
                             "vs_previous": p.vs_previous, "vs_baseline": p.vs_baseline, "device": p.device,
                             "subject": p.subject} for p in rows])
    t = Table(title=f"{op} promotions")
    for col in ("rev", "date", "vs previous", "vs baseline", "run", "subject"):
        t.add_column(col, no_wrap=col == "run")  # an id to type: never cut
    for p in rows:
        t.add_row(p.rev[:10], p.date[:19], ratio_text(p.vs_previous), ratio_text(p.vs_baseline), p.run_id,
                  escape(clip(p.subject, 60)))
    console.print(t)


def rollback(op: str = typer.Argument(..., help="operator line"),
             to: str = typer.Option(None, "--to", metavar="REV",
                                    help="revision whose promoted kernel to restore")) -> None:
    """Restore an earlier promoted kernel as a new commit (default: the previous promotion).

    \b
    Examples:
      aka rollback gdn_prefill
      aka rollback gdn_prefill --to HEAD~3
    """
    the_op = get_op(op)
    rev = gitops.rollback(the_op.root, op, to)
    meta = gitops.read_promoted_meta(the_op.root, op)
    what = (f"the kernel of run {meta.run_id or '?'} attempt {'?' if meta.attempt is None else meta.attempt} (code "
            f"{meta.code_hash})" if meta and meta.code_hash
            else "no promoted kernel: the op runs its baseline")
    console.print(f"{op}: rolled back in commit {rev[:10]}; restored {what}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
    app.command("show")(show)
    app.command("history")(history)
    app.command("rollback")(rollback)
