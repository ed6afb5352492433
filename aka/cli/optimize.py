"""`aka optimize`: parse, wire, show progress; the summary and the other run commands are in aka.cli.runs."""

from __future__ import annotations

import sys
import time
from collections import deque
from contextlib import nullcontext
from typing import Any

import typer
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from aka.cli.fields import default_of, option
from aka.cli.runs import attempt_row, console, cpu_note, print_summary, ratio_text
from aka.config import LLMSettings
from aka.contract.ops import get_op, project_root
from aka.errors import AkaError, WorkersLost
from aka.evaluate.wire import ProgressLine
from aka.run.store import RunStore
from aka.settings import Budget, OptimizeSettings, PromotionRules, default_candidates


class EndpointFault(AkaError):
    """The LLM endpoint failed mid-run (after the SDK's retries); the run is recorded as stopped."""


class LiveView:
    """Attempt, stage, candidate, best geomean vs the baseline, budget left; one line per decided attempt.

    The attempt is numbered as the table and the decided lines number it (#0 first)."""

    def __init__(self, live: Live, budget: int):
        self.live = live
        self.state: dict[str, Any] = {"attempt": None, "stage": "setup", "candidate": "", "best": None,
                                      "left": budget, "tokens": 0, "cost": None, "llm": ""}

    def update(self, **fields: Any) -> None:
        rec = fields.pop("record", None)
        self._count(fields.pop("call_tokens", 0), fields.pop("call_cost", None))
        self.state.update(fields)
        if rec is not None:
            r = attempt_row(rec, 40, 72)
            self.live.console.print(f"#{r[0]:>3} {r[3]:>8} vs baseline  {r[2]:<9} {r[5]}  {r[1]}", highlight=False)
        s = self.state
        at = "-" if s["attempt"] is None else f"#{s['attempt']}"
        self.live.update(Panel(
            f"attempt {at}  stage [bold]{escape(s['stage'])}[/bold]  best vs baseline {ratio_text(s['best'])}  "
            f"budget left {s['left']}{_tokens(s['tokens'], s['cost'])}\n{escape(s['candidate'][:100])}"
            + (f"\n[dim]{escape(s['llm'][:120])}[/dim]" if s["llm"] else ""), title="aka optimize"))

    def _count(self, tokens: int, cost: float | None) -> None:
        """LLM calls report their usage as they finish (a plan prepared ahead counts when it is made)."""
        self.state["tokens"] += tokens
        if cost is not None:
            self.state["cost"] = (self.state["cost"] or 0.0) + cost


class LineView:
    """Progress as plain lines, flushed, for a stdout that is not a terminal (a file, a pipe, CI): one
    line per stage change and per measured shape, each with the seconds since the command started, and
    one per decided attempt. Rich's live panel prints nothing there until the end: on the H200
    (2026-12-03) a redirected run showed nothing for 5.5 minutes."""

    def __init__(self, t0: float):
        self.t0 = t0
        self.last = ""

    def say(self, line: str) -> None:
        console.print(f"[{time.monotonic() - self.t0:6.1f} s] {line}", highlight=False, markup=False,
                      soft_wrap=True)
        console.file.flush()

    def shape(self, rec: ProgressLine) -> None:
        times = rec.graph_us or rec.median_us
        kind = "graph replay" if rec.graph_us else "eager"
        label = " (interpreter, not representative)" if rec.interpreter else ""
        self.say(f"  {rec.shape} ({rec.done}/{rec.total}): "
                 + ", ".join(f"{n} {us:,.1f} µs" for n, us in times.items()) + f" {kind}{label}")

    def update(self, **fields: Any) -> None:
        rec = fields.pop("record", None)
        fields.pop("call_tokens", None)
        fields.pop("call_cost", None)
        if rec is not None:
            r = attempt_row(rec, 40, 72)
            parts = " ".join(f"{k} {v:.1f}" for k, v in rec.stage_s.items())
            secs = f" ({rec.duration_s:.1f} s{': ' + parts if parts else ''})" if rec.duration_s else ""
            self.say(Text.from_markup(f"#{r[0]} {r[3]} vs baseline  {r[2]} {r[5]}  {r[1]}{secs}").plain)
        stage = fields.get("stage")
        if stage and stage != "decided":
            at = f"#{fields['attempt']} " if fields.get("attempt") is not None else ""
            line = f"{at}{stage}"
            if line != self.last:
                self.last = line
                self.say(line)


def _tokens(tokens: int, cost: float | None) -> str:
    if not tokens:
        return ""
    return f"  tokens {tokens:,}" + (f" (~${cost:.2f})" if cost is not None else "")


def _settings(op: str, budget: int | None, max_time: float | None, max_tokens: int | None, patience: int | None,
              min_gain: float, margin: float, allow_regression: bool, backend: str, no_commit: bool,
              seed: int, gate_rounds: int, llm: LLMSettings, competitors: bool = True,
              profile: bool = True) -> OptimizeSettings:
    import torch

    interpreter = not torch.cuda.is_available()
    candidates = default_candidates(interpreter) if budget is None else budget
    return OptimizeSettings(
        op=op, backend=backend, commit=not no_commit, seed=seed, gate_rounds=gate_rounds, llm=llm,
        interpreter=interpreter, competitors=competitors, profile=profile,
        budget=Budget(max_candidates=candidates, max_time_s=max_time, max_tokens=max_tokens, patience=patience),
        rules=PromotionRules(min_gain=min_gain, shape_margin=margin, allow_shape_regression=allow_regression),
    )


def optimize(
    op: str = typer.Argument(None, help="operator line, e.g. gdn_prefill (omit with --resume)"),
    budget: int = typer.Option(None, "--budget", metavar="N", min=1, help=f"candidates to evaluate [default: "
                               f"{default_candidates(False)}; CPU: {default_candidates(True)}]"),
    max_time: float = typer.Option(None, "--max-time", metavar="SECONDS",
                                   help="stop after this many seconds of evaluation (with "
                                        "--resume: the new limit for the whole run)"),
    max_tokens: int = typer.Option(None, "--max-tokens", metavar="N", help="stop after this many backend tokens"),
    patience: int = typer.Option(None, "--patience", metavar="N",
                                 help="stop after this many attempts without a new best"),
    min_gain: float = option(PromotionRules, "min_gain", "--min-gain", metavar="FRACTION"),
    margin: float = option(PromotionRules, "shape_margin", "--margin", metavar="FRACTION"),
    allow_regression: bool = option(PromotionRules, "allow_shape_regression", "--allow-shape-regression"),
    backend: str = option(OptimizeSettings, "backend", "--backend", metavar="NAME"),
    model: str = typer.Option(None, "--model", metavar="NAME",
                              help="LLM model name [default: the config's, or the server's only one]"),
    base_url: str = typer.Option(None, "--base-url", metavar="URL",
                                 help="LLM endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, Ollama)"),
    repairs: int = option(LLMSettings, "repairs", "--repairs", metavar="N", min=0),
    lang: str = option(LLMSettings, "lang", "--lang", metavar="LANG"),
    replay_from: str = typer.Option(None, "--from", metavar="RUN",
                                    help="run id whose LLM exchanges --backend replay plays back"),
    tools: bool = typer.Option(None, "--tools/--no-tools",
                               help="LLM codegen may call tools (compile, check, time, ...) through native tool "
                                    "calling [default: on, except --backend openai with --base-url: many local "
                                    "servers run without a tool parser]"),
    max_tool_calls: int = option(LLMSettings, "max_tool_calls", "--max-tool-calls", metavar="N", min=1),
    no_commit: bool = typer.Option(False, "--no-commit", help="write a promoted kernel but do not commit it"),
    resume: str = typer.Option(None, "--resume", metavar="RUN", help="continue the run with this id"),
    seed: int = option(OptimizeSettings, "seed", "--seed", metavar="N"),
    cpu_gate: str = typer.Option(",".join(default_of(OptimizeSettings, "cpu_gate_sets")), "--cpu-gate", metavar="SETS",
                                 help=OptimizeSettings.model_fields["cpu_gate_sets"].description),
    ahead: int = typer.Option(None, "--prepare-ahead", metavar="N", min=0,
                              help="candidates compiled in parallel while one is timed [GPU: cores/4 up to 4]"),
    gate_rounds: int = option(OptimizeSettings, "gate_rounds", "--gate-rounds", metavar="N", min=1),
    competitors: bool = option(OptimizeSettings, "competitors", "--competitors/--no-competitors"),
    profile: bool = option(OptimizeSettings, "profile", "--profile/--no-profile"),
    gpus: int = typer.Option(None, "--gpus", metavar="N", min=1,
                             help="candidates measured at once, one GPU each, on Ray workers of this machine "
                                  "(aka[ray]; on CPU: interpreter workers) "
                                  f"[default: {OptimizeSettings.model_fields['gpus'].default}, no Ray]"),
    record_knowledge: bool = typer.Option(
        False, "--record-knowledge", help="commit kernels/OP/knowledge.json at the end (what each structure and "
        "value measured against the incumbent on this GPU; every run writes it, promotions commit it)"),
    cluster: str = typer.Option(None, "--cluster", metavar="ADDRESS",
                                help="measure candidates on a Ray cluster's GPU workers: ray://HOST:PORT, auto inside "
                                     "a Ray job, or local (a new Ray instance here, even for --gpus 1) "
                                     "(aka[ray]); with --gpus, the number of workers"),
) -> None:
    """Search for a faster kernel; promote it only when correct everywhere and measurably faster.

    \b
    Examples:
      aka optimize gdn_prefill --budget 3
      aka optimize gdn_prefill --backend anthropic --max-time 3600
      aka optimize --resume RUN --budget 20
    """
    t0 = time.monotonic()
    if not console.is_terminal:  # the first line at once, also into a file (the set-up takes a while)
        console.print(f"aka optimize {op or ''}{' --resume ' + resume if resume else ''}: starting", highlight=False,
                      markup=False)
        console.file.flush()
    from aka.agent.llm.base import LLM_BACKENDS, get_backend
    from aka.evaluate.parent.evaluator import RealEvaluator
    from aka.run.loop import run_loop, summarize
    from aka.run.prefetch import head_start

    runs_root = project_root() / "runs"
    if resume:
        store = RunStore.open(runs_root, resume)
        stored = OptimizeSettings.model_validate(store.read_run().settings)
        settings = resumed_settings(stored, budget, max_time, gpus, cluster)
        if settings != stored:  # kept, so `aka show` and a later resume see the limits the run now has
            store.update_run(settings=settings.model_dump())
        the_op = get_op(settings.op)
        if store.read_run().status == "setting up":  # killed during its set-up: no baseline figures
            raise AkaError(f"run {resume} stopped during its set-up, before its baseline was measured: nothing to "
                           f"resume; start a new run (aka optimize {settings.op})")
    else:
        if not op:
            raise typer.BadParameter("give an op (e.g. gdn_prefill) or --resume RUN")
        the_op = get_op(op)
        if lang not in ("triton", "cuda"):
            raise typer.BadParameter(f"--lang {lang}: choose triton or cuda")
        llm = LLMSettings(model=model, base_url=base_url, repairs=repairs, lang=lang, replay_from=replay_from,
                          tools=default_tools(backend, base_url, runs_root, replay_from) if tools is None else tools,
                          max_tool_calls=max_tool_calls)
        settings = _settings(op, budget, max_time, max_tokens, patience, min_gain, margin, allow_regression,
                             backend, no_commit, seed, gate_rounds, llm, competitors, profile)
        settings.cpu_gate_sets = [x.strip() for x in cpu_gate.split(",") if x.strip()]
        settings.prepare_ahead = ahead if ahead is not None else _default_ahead(settings)
        settings.gpus, settings.cluster = gpus or 1, cluster
    if settings.gpus > 1 or settings.cluster:
        from aka.run.raypool import require_ray

        require_ray()  # without the extra: its one-line error now, before the baseline is measured
    # LLM backends check their SDK and key here, and reach their endpoint once: a missing key or a
    # dead server fails in one line before the baseline is measured
    be = (get_backend(settings.backend, op=the_op, llm=settings.llm) if settings.backend in LLM_BACKENDS
          else get_backend(settings.backend))
    getattr(be, "probe", lambda: None)()
    evaluator = RealEvaluator(the_op, settings)
    if settings.interpreter:
        console.print(f"[yellow]no GPU: {cpu_note(settings)}[/yellow]")
    lines = None if console.is_terminal else LineView(t0)
    if lines is not None:
        evaluator.on_shape = lines.shape
    live_or_not = (Live(Panel("measuring the baseline ..."), console=console, refresh_per_second=4, transient=True)
                   if lines is None else nullcontext())
    with live_or_not as live:
        view = LiveView(live, settings.budget.max_candidates) if lines is None else lines
        head: deque = deque()
        if not resume:
            start = None
            if settings.head_start and not settings.interpreter:  # 2 CPU cores: the set-up's gate needs them
                def start(s: RunStore) -> None:
                    head.extend(head_start(s, settings, the_op, be, evaluator, view))
            store = _measure_baseline(live, runs_root, settings, the_op, evaluator,
                                      lines.say if lines is not None else _quiet, start, t0)
        console.print(f"run [bold]{store.run_id}[/bold] ({store.path})", soft_wrap=True)  # an id to copy: one line
        try:
            summary = run_loop(store, settings, the_op, be, evaluator, view, head=head)
        except KeyboardInterrupt:
            store.update_run(status="interrupted", summary=summarize(store, "interrupted (Ctrl-C or a time cap)"))
            _stop(live)
            print_summary(store.path)
            console.print("interrupted; finished attempts are saved. "
                          f"Resume with: aka optimize --resume {store.run_id}")
            sys.exit(130)
        except BaseException as exc:
            store.update_run(status="crashed", error=f"{type(exc).__name__}: {str(exc)[:300]}")
            _stop(live)
            console.print(f"run crashed ({type(exc).__name__}); finished attempts are saved. Once the cause is "
                          f"fixed, resume with: aka optimize --resume {store.run_id}", highlight=False)
            raise
    print_summary(store.path, summary)
    if record_knowledge:
        console.print(commit_knowledge(the_op, store), highlight=False)
    if summary.get("workers_lost"):
        raise WorkersLost(f"evaluation workers lost: {summary['workers_lost']}; finished attempts are saved. "
                          f"Resume with: aka optimize --resume {store.run_id} (--gpus 1 resumes on this machine "
                          "without Ray)")
    if summary.get("fault"):
        raise EndpointFault(fault_line(summary["fault"], store.run_id))


def commit_knowledge(op, store: RunStore) -> str:
    """`--record-knowledge`: the op's knowledge.json committed alone; one line saying what happened."""
    from aka.knowledge.measured import kernel_dir_of, knowledge_path, record_run
    from aka.run import gitops

    n = record_run(store, op)  # the loop recorded it already; idempotent
    path = knowledge_path(kernel_dir_of(op))
    if not path.is_file():
        return "knowledge: nothing measured on a GPU in this run; nothing to commit"
    rel = str(path.relative_to(op.root))
    commit = gitops.commit_paths(op.root, (rel,), f"{op.name}: knowledge of run {store.run_id} ({n} entries)")
    return f"knowledge: {rel} " + (f"committed ({commit[:10]})" if commit else "unchanged since the last commit")


def resumed_settings(stored: OptimizeSettings, budget: int | None, max_time: float | None,
                     gpus: int | None = None, cluster: str | None = None) -> OptimizeSettings:
    """A resumed run keeps its settings; --budget and --max-time, when given, replace the limits (both
    count the whole run, earlier sessions included), so a run stopped by either can be extended;
    --gpus and --cluster move it (a cluster run resumes here with --gpus 1, and the reverse)."""
    limits = {k: v for k, v in (("max_candidates", budget), ("max_time_s", max_time)) if v is not None}
    out = stored.model_copy(update={"budget": stored.budget.model_copy(update=limits)}) if limits else stored
    if gpus is not None or cluster is not None:
        out = out.model_copy(update={"gpus": gpus or out.gpus, "cluster": cluster if cluster is not None
                                     else (None if gpus == 1 else out.cluster)})
    return out


def fault_line(fault: dict[str, Any], run_id: str) -> str:
    """One line: what failed, what to do, and the resume command only where resuming can help."""
    fix = fault.get("fix") or ""
    if not fault.get("resumable"):
        return f"LLM endpoint fault: {fault['error']}; resuming would send the same request: start a new run"
    then = f"{fix}, then resume" if fix and fix not in fault["error"] else "resume"
    return f"LLM endpoint fault: {fault['error']}; {then} with: aka optimize --resume {run_id}"


def _quiet(line: str) -> None:
    pass


def _stop(live: Live | None) -> None:
    if live is not None:
        live.stop()


def _measure_baseline(live: Live | None, runs_root, settings: OptimizeSettings, op, evaluator, say,
                      start=None, t0: float | None = None) -> RunStore:
    from aka.run.setup import prepare_run

    try:
        return prepare_run(runs_root, settings, op, evaluator, say, start, t0)
    except KeyboardInterrupt:  # prepare_run removed the run directory it had begun: nothing to resume
        _stop(live)
        console.print("interrupted while measuring the baseline; nothing was recorded. "
                      "Run the same command again to start over.", highlight=False)
        sys.exit(130)


def default_tools(backend: str, base_url: str | None, runs_root=None, replay_from: str | None = None) -> bool:
    """Tools where the wire format surely carries them: the Anthropic API, OpenAI's own. An OpenAI-
    compatible server (vLLM, SGLang, Ollama) refuses tool calls unless started with a tool parser,
    so there they are opt-in (--tools). Replay asks as the recorded run asked."""
    if backend == "replay" and replay_from and runs_root is not None:
        from aka.records import find_run, read_run_record

        try:
            run = read_run_record(find_run(runs_root, replay_from))
            return bool(run.settings["llm"].get("tools", True))
        except (AkaError, KeyError, AttributeError, TypeError):
            return True  # the replay backend itself says what is wrong with --from
    return not (backend == "openai" and base_url)


def _default_ahead(settings: OptimizeSettings) -> int:
    """GPU: keep most cores compiling while one candidate is timed; LLMs and the interpreter: one."""
    import os

    from aka.agent.llm.base import LLM_BACKENDS

    if settings.interpreter or settings.backend in LLM_BACKENDS:
        return 1
    return max(1, min(4, (os.cpu_count() or 4) // 4))  # x compile_split (3) workers: 12 on 16 cores


def register(app: typer.Typer) -> None:
    app.command("optimize")(optimize)
