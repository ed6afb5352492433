"""`aka optimize`, `aka runs`, `aka show`, `aka history`, `aka rollback`: parse, wire, print."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from aka import gitops
from aka.config import LLMSettings
from aka.ops import get_op, project_root
from aka.settings import Budget, OptimizeSettings, PromotionRules
from aka.store import RunStore, find_run, list_runs, read_attempts

console = Console()
if not console.is_terminal:  # logs (device runs, CI): wide enough that the tables do not wrap
    console = Console(width=160)


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def _row(rec: dict[str, Any]) -> list[str]:
    plan = rec.get("plan") or {}
    change = ", ".join(plan.get("cited_evidence") or []) or plan.get("hypothesis") or ""
    what = (f"{plan.get('pattern')}: " if plan.get("pattern") else "") + change
    bench = rec.get("bench") or {}
    stage = rec.get("failed_stage") or ("bench" if bench else "")
    d = rec["decision"]
    style = {"promoted": "green", "rejected": "red"}.get(d["verdict"], "yellow")
    return [str(rec["n"]), what[:64], stage or "done", _x(rec.get("score")), _x(bench.get("vs_incumbent")),
            f"[{style}]{d['reason'][:72]}[/{style}]"]


def attempts_table(attempts: list[dict[str, Any]], title: str) -> Table:
    t = Table(title=title, expand=False)
    for col, j in (("#", "right"), ("plan", "left"), ("stopped at", "left"), ("vs baseline", "right"),
                   ("vs incumbent", "right"), ("decision", "left")):
        t.add_column(col, justify=j)
    for rec in attempts:
        t.add_row(*_row(rec))
    return t


class LiveView:
    """Round, stage, candidate, best geomean vs the baseline, budget left; one line per decided attempt."""

    def __init__(self, live: Live, budget: int):
        self.live = live
        self.state: dict[str, Any] = {"round": "-", "stage": "setup", "candidate": "", "best": None, "left": budget,
                                      "tokens": 0, "cost": None, "llm": ""}

    def update(self, **fields: Any) -> None:
        rec = fields.pop("record", None)
        self._count(fields.pop("call_tokens", 0), fields.pop("call_cost", None))
        self.state.update(fields)
        if rec is not None:
            r = _row(rec)
            self.live.console.print(f"#{r[0]:>3} {r[3]:>8} vs baseline  {r[2]:<9} {r[5]}  {r[1]}", highlight=False)
        s = self.state
        self.live.update(Panel(
            f"round {s['round']}  stage [bold]{s['stage']}[/bold]  best vs baseline {_x(s['best'])}  "
            f"budget left {s['left']}{_tokens(s['tokens'], s['cost'])}\n{s['candidate'][:100]}"
            + (f"\n[dim]{s['llm'][:120]}[/dim]" if s["llm"] else ""), title="aka optimize"))

    def _count(self, tokens: int, cost: float | None) -> None:
        """LLM calls report their usage as they finish (a plan prepared ahead counts when it is made)."""
        self.state["tokens"] += tokens
        if cost is not None:
            self.state["cost"] = (self.state["cost"] or 0.0) + cost


def _tokens(tokens: int, cost: float | None) -> str:
    if not tokens:
        return ""
    return f"  tokens {tokens:,}" + (f" (~${cost:.2f})" if cost is not None else "")


def _settings(op: str, budget: int, max_time: float | None, max_tokens: int | None, patience: int | None,
              min_gain: float, margin: float, allow_regression: bool, backend: str, no_commit: bool,
              seed: int, gate_rounds: int, llm: LLMSettings, competitors: bool = True,
              profile: bool = True) -> OptimizeSettings:
    import torch

    return OptimizeSettings(
        op=op, backend=backend, commit=not no_commit, seed=seed, gate_rounds=gate_rounds, llm=llm,
        interpreter=not torch.cuda.is_available(), competitors=competitors, profile=profile,
        budget=Budget(max_candidates=budget, max_time_s=max_time, max_tokens=max_tokens, patience=patience),
        rules=PromotionRules(min_gain=min_gain, shape_margin=margin, allow_shape_regression=allow_regression),
    )


def optimize(
    op: str = typer.Argument(None, help="operator line, e.g. gdn_prefill (omit with --resume)"),
    budget: int = typer.Option(None, "--budget", help="candidates to evaluate \\[default: 20; CPU: 3]"),
    max_time: float = typer.Option(None, "--max-time", help="stop after this many seconds of evaluation"),
    max_tokens: int = typer.Option(None, "--max-tokens", help="stop after this many backend tokens"),
    patience: int = typer.Option(None, "--patience", help="stop after this many attempts without a new best"),
    min_gain: float = typer.Option(0.01, "--min-gain", help="geomean gain needed to promote (0.01 = 1%)"),
    margin: float = typer.Option(0.05, "--margin", help="largest per-shape slowdown accepted (0.05 = 5%)"),
    allow_regression: bool = typer.Option(False, "--allow-shape-regression", help="accept slower shapes"),
    backend: str = typer.Option("offline", "--backend",
                                help="offline (default, no API key), anthropic, openai (or any OpenAI-compatible "
                                     "server with --base-url), replay (with --from RUN)"),
    model: str = typer.Option(None, "--model", help="LLM model name \\[default: the config's, or the server's only one]"),
    base_url: str = typer.Option(None, "--base-url", help="LLM endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, Ollama)"),
    repairs: int = typer.Option(2, "--repairs", min=0, help="codegen repairs after a check/compile error (LLM)"),
    lang: str = typer.Option("triton", "--lang", help="candidate language: triton or cuda (LLM backends)"),
    replay_from: str = typer.Option(None, "--from", help="run id whose LLM exchanges --backend replay plays back"),
    no_commit: bool = typer.Option(False, "--no-commit", help="write a promoted kernel but do not commit it"),
    resume: str = typer.Option(None, "--resume", help="continue the run with this id"),
    seed: int = typer.Option(0, "--seed", help="search and gate seed"),
    cpu_gate: str = typer.Option("smoke,edge", "--cpu-gate", help="shape sets gated in the interpreter"),
    ahead: int = typer.Option(None, "--prepare-ahead", min=0,
                              help="candidates compiled in parallel while one is timed [GPU: cores/4 up to 4]"),
    gate_rounds: int = typer.Option(3, "--gate-rounds", help="gate rounds per shape set on the GPU"),
    competitors: bool = typer.Option(True, "--competitors/--no-competitors",
                                     help="GPU: time fla/sdpa once at setup, for the summary (minutes on a fresh "
                                          "machine: fla autotunes; counts against --max-time)"),
    profile: bool = typer.Option(True, "--profile/--no-profile",
                                 help="GPU: profile the incumbent with ncu once at the start, as evidence for the "
                                      "plans (about a minute; counts against --max-time)"),
) -> None:
    """Search for a faster kernel; promote it only when correct everywhere and measurably faster."""
    from aka.evaluator import RealEvaluator
    from aka.llm.base import LLM_BACKENDS, get_backend
    from aka.loop import prepare_run, run_loop

    runs_root = project_root() / "runs"
    if resume:
        store = RunStore.open(runs_root, resume)
        settings = OptimizeSettings.model_validate(store.read_run()["settings"])
        if budget is not None:
            settings = settings.model_copy(update={"budget": settings.budget.model_copy(
                update={"max_candidates": budget})})
        the_op = get_op(settings.op)
    else:
        if not op:
            raise typer.BadParameter("give an op (e.g. gdn_prefill) or --resume RUN")
        the_op = get_op(op)
        if lang not in ("triton", "cuda"):
            raise typer.BadParameter(f"--lang {lang}: choose triton or cuda")
        llm = LLMSettings(model=model, base_url=base_url, repairs=repairs, lang=lang, replay_from=replay_from)
        settings = _settings(op, 20, max_time, max_tokens, patience, min_gain, margin, allow_regression, backend,
                             no_commit, seed, gate_rounds, llm, competitors, profile)
        if budget is None and settings.interpreter:
            budget = 3  # interpreter candidates take ~20 s each on 2 cores; keep the out-of-the-box run short
        settings.budget = settings.budget.model_copy(update={"max_candidates": budget or 20})
        settings.cpu_gate_sets = [x.strip() for x in cpu_gate.split(",") if x.strip()]
        settings.prepare_ahead = ahead if ahead is not None else _default_ahead(settings)
    # LLM backends check their SDK and key here: a missing key fails before the baseline is measured
    be = (get_backend(settings.backend, op=the_op, llm=settings.llm) if settings.backend in LLM_BACKENDS
          else get_backend(settings.backend))
    evaluator = RealEvaluator(the_op, settings)
    if settings.interpreter:
        console.print(f"[yellow]no GPU: {_cpu_note(settings)}[/yellow]")
    with Live(Panel("measuring the baseline ..."), console=console, refresh_per_second=4, transient=True) as live:
        if not resume:
            store = prepare_run(runs_root, settings, the_op, evaluator)
        console.print(f"run [bold]{store.run_id}[/bold] ({store.path})")
        view = LiveView(live, settings.budget.max_candidates)
        try:
            summary = run_loop(store, settings, the_op, be, evaluator, view)
        except KeyboardInterrupt:
            store.update_run(status="interrupted")
            live.stop()
            print_summary(store.path, {"stop_reason": "interrupted (Ctrl-C or a time cap)"})
            console.print("interrupted; finished attempts are saved. "
                          f"Resume with: aka optimize --resume {store.run_id}")
            sys.exit(130)
        except BaseException:
            store.update_run(status="crashed")
            live.stop()
            console.print(f"run crashed; resume with: aka optimize --resume {store.run_id}")
            raise
    print_summary(store.path, summary)


def _default_ahead(settings: OptimizeSettings) -> int:
    """GPU: keep most cores compiling while one candidate is timed; LLMs and the interpreter: one."""
    import os

    from aka.llm.base import LLM_BACKENDS

    if settings.interpreter or settings.backend in LLM_BACKENDS:
        return 1
    return max(1, min(4, (os.cpu_count() or 4) // 4))  # x compile_split (3) workers: 12 on 16 cores


def _cpu_note(settings: OptimizeSettings) -> str:
    return (f"Triton CPU interpreter; gate on {'+'.join(settings.cpu_gate_sets)} shapes, "
            f"{settings.cpu_gate_rounds} rounds (GPU: smoke+edge then full, {settings.gate_rounds} rounds); "
            "timings not representative; nothing is promoted")


def print_summary(run_dir: Path, summary: dict[str, Any] | None = None) -> None:
    import json

    run = json.loads((run_dir / "run.json").read_text())
    attempts = read_attempts(run_dir)
    summary = summary or run.get("summary") or {}
    console.print(attempts_table(attempts, f"{run['op']} run {run['run_id']} on {run['device'].get('name')}"))
    base = run["baseline"]
    timing = base.get("timing", "?")
    lines = [
        f"shapes timed: {base.get('shapes')} ({timing} timings"
        + (", not representative)" if timing != "gpu" else ")"),
        "baseline: " + ", ".join(f"{s} {t:.0f} µs" for s, t in base["baseline_us"].items()),
        f"stopped: {summary.get('stop_reason', run.get('status'))}; {len(attempts)} attempts, "
        f"{summary.get('elapsed_s', round(run.get('setup_s', 0) + sum(a['duration_s'] for a in attempts)))} s, "
        f"{summary.get('tokens', sum(a.get('tokens', 0) for a in attempts))} tokens{usage_text(attempts)}",
        f"best candidate vs baseline: {_x(summary.get('best_score'))}; incumbent now: {summary.get('incumbent')}",
    ]
    settings = OptimizeSettings.model_validate(run["settings"])
    if settings.interpreter:
        lines.insert(0, _cpu_note(settings))
    g = base.get("incumbent_gate") or {}
    if g and not g.get("ok"):
        lines.append(f"[red]the incumbent itself fails the gate on {'+'.join(g['sets'])}: {g['error'][:160]}; "
                     "candidates sharing its numerics cannot pass (check the kernel or the tolerances)[/red]")
    for p in run.get("promotions", []):
        lines.append(f"promoted attempt {p['n']}" + (f" in commit {p['commit'][:10]}" if p.get("commit") else
                                                    " (written, not committed)"))
    if not run.get("promotions"):
        lines.append(f"nothing promoted: {_tally(attempts)}")
    console.print(Panel("\n".join(lines), title="summary"))


def usage_text(attempts: list[dict[str, Any]]) -> str:
    """' (1,200 in, 300 out, 800 cached; ~$0.01)' summed over the attempts' recorded usage."""
    tot = {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0}
    cost = None
    for a in attempts:
        u = a.get("usage") or {}
        for k in tot:
            tot[k] += u.get(k, 0) or 0
        if u.get("cost_usd") is not None:
            cost = (cost or 0.0) + u["cost_usd"]
    if not any(tot.values()):
        return ""
    money = f"; ~${cost:.2f}" if cost is not None else "; no price for this model"
    return (f" ({tot['input_tokens']:,} in, {tot['output_tokens']:,} out, {tot['cached_tokens']:,} cached"
            f"{money})")


def _tally(attempts: list[dict[str, Any]]) -> str:
    """'2 x gate, 1 x interpreter timings cannot promote': why attempts ended, most common first."""
    from collections import Counter

    why = Counter(a.get("failed_stage") or a["decision"]["reason"].removeprefix("not promoted: ") for a in attempts)
    return ", ".join(f"{k} x {n}" if n > 1 else k for k, n in why.most_common()) or "no attempts"


def runs(op: str = typer.Argument(None, help="only this op")) -> None:
    """List optimisation runs, newest first."""
    t = Table(title="aka runs")
    for col in ("run", "op", "started", "status", "attempts", "best", "promoted", "device"):
        t.add_column(col)
    for r in list_runs(project_root() / "runs", op):
        t.add_row(r["run_id"], r["op"], r["started"], r["status"], f"{r['attempts']}/{r['budget']}",
                  _x(r["best"]), str(r["promoted"]), r["device"])
    console.print(t)


def show(run_id: str = typer.Argument(..., help="a run id from `aka runs`")) -> None:
    """Show one run: settings, baseline, every attempt with its decision."""
    print_summary(find_run(project_root() / "runs", run_id))


def history(op: str = typer.Argument(..., help="operator line")) -> None:
    """List the promotions of an op (git history of kernels/<op>/promoted.py)."""
    the_op = get_op(op)
    t = Table(title=f"{op} promotions")
    for col in ("rev", "date", "vs previous", "vs baseline", "run", "subject"):
        t.add_column(col)
    for p in gitops.history(the_op.root, op):
        m = p.meta
        t.add_row(p.rev[:10], p.date[:19], _x(m.get("geomean_vs_previous")), _x(m.get("geomean_vs_baseline")),
                  str(m.get("run_id", "-")), p.subject[:60])
    console.print(t)


def rollback(op: str = typer.Argument(..., help="operator line"),
             to: str = typer.Option(None, "--to", help="revision whose promoted kernel to restore")) -> None:
    """Restore an earlier promoted kernel as a new commit (default: the previous promotion)."""
    the_op = get_op(op)
    rev = gitops.rollback(the_op.root, op, to)
    console.print(f"{op}: rolled back in commit {rev[:10]}")


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize)
    app.command("runs")(runs)
    app.command("show")(show)
    app.command("history")(history)
    app.command("rollback")(rollback)

