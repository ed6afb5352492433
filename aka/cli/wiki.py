"""`aka wiki ...` (search, show, check, stats, lessons, distill) and `aka hw`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from aka.contract.ops import op_names, project_root
from aka.errors import AkaError
from aka.hardware import Detected, detect, merge
from aka.knowledge.lessons import distill as distill_drafts
from aka.knowledge.lessons import load_lessons, write_lessons
from aka.knowledge.wiki_stats import card_stats, ordered, run_logs
from aka.wiki import check_wiki, get_card, load_wiki, rank, retrieve, wiki_dir

console = Console()
ROWS = 10  # search hits shown
wiki_app = typer.Typer(help="The GPU wiki: hardware pages, technique cards, anti-patterns.", no_args_is_help=True)


@wiki_app.command()
def search(
    query: str = typer.Argument(..., help="words, e.g. 'split kv decode'"),
    op: str | None = typer.Option(None, metavar="OP", help="only cards for this op (and general ones)"),
    arch: str | None = typer.Option(None, metavar="ARCH",
                                     help="only cards for this arch, e.g. sm_90 (and general ones)"),
    tag: Annotated[list[str] | None, typer.Option(metavar="TAG", help="boost cards with this tag (repeatable)")] = None,
    budget: int | None = typer.Option(None, metavar="CHARS",
                                      help="keep only what fits in this many prompt characters"),
    limit: int = typer.Option(ROWS, metavar="N", help="rows to show"),
) -> None:
    """Rank cards for a query (BM25 over title, tags, body; filtered by op and arch).

    \b
    Examples:
      aka wiki search 'split kv decode' --op fa4_decode
    """
    cards = load_wiki()
    tags = tuple(tag or ())
    hits = rank(cards, query, op, arch, tags)
    if budget is not None:
        keep = {c.id for c in retrieve(cards, query, op, arch, tags, budget_chars=budget)}
        hits = [h for h in hits if h.card.id in keep]
    table = Table(title=f"wiki search: {query!r}" + (f" op={op}" if op else "") + (f" arch={arch}" if arch else ""))
    for col in ("#", "id", "kind", "score", "title"):
        table.add_column(col, justify="right" if col in ("#", "score") else "left")
    for i, h in enumerate(hits[:limit], 1):
        table.add_row(str(i), h.card.id, h.card.meta.kind, f"{h.score:.1f}", h.card.meta.title)
    console.print(table)


@wiki_app.command()
def show(card_id: str = typer.Argument(..., help="card id, e.g. split-kv-decode")) -> None:
    """Print one page as written (front matter and body).

    \b
    Examples:
      aka wiki show split-kv-decode
    """
    card = get_card(load_wiki(), card_id)
    console.print(card.path.read_text(encoding="utf-8"), markup=False, highlight=False)


@wiki_app.command()
def check() -> None:
    """Validate every page: front matter, unique ids, folders, known ops, every number sourced."""
    root = wiki_dir()
    cards, problems = check_wiki(root, set(op_names()))
    for line in problems:
        console.print(f"[red]✗[/red] {line}", markup=True, highlight=False, soft_wrap=True)
    if problems:
        raise typer.Exit(1)
    kinds = {k: sum(c.meta.kind == k for c in cards) for k in ("hardware", "technique", "anti-pattern", "op-note")}
    console.print(f"wiki OK: {len(cards)} pages ({', '.join(f'{v} {k}' for k, v in kinds.items())})")


@wiki_app.command()
def stats(
    runs: Annotated[Path | None, typer.Option(metavar="DIR",
                                              help="runs folder (default: <project>/runs) or one run")] = None,
) -> None:
    """Per card: plans citing it, candidates that passed the gate, promotions, across runs."""
    root = runs or project_root() / "runs"
    logs = run_logs(root)
    if not logs:
        raise AkaError(f"{root}: no attempts.jsonl found; run `aka optimize` first or pass --runs")
    known = {c.id for c in load_wiki()}
    table = Table(title=f"wiki card payoff over {len(logs)} run(s)")
    for col in ("card", "cited", "passed gate", "promoted", "payoff", "runs"):
        table.add_column(col, justify="left" if col == "card" else "right")
    for s in ordered(card_stats(logs)):
        name = s.card_id if s.card_id in known else f"{s.card_id} [red](not in wiki)[/red]"
        table.add_row(name, str(s.cited), str(s.passed_gate), str(s.promoted), f"{s.payoff:.0%}", str(len(s.runs)))
    console.print(table)


def _run_dir(run: Path) -> Path:
    if (run / "attempts.jsonl").is_file():
        return run
    alt = project_root() / "runs" / run
    if (alt / "attempts.jsonl").is_file():
        return alt
    raise AkaError(f"{run}: not a run folder (no attempts.jsonl); pass runs/<op>/<run-id>")


@wiki_app.command()
def lessons(run: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="run folder, runs/<op>/<run-id>")]) -> None:
    """(Re)write RUN_DIR/lessons.jsonl from its attempts and print the lessons."""
    for les in write_lessons(_run_dir(run)):
        console.print(f"{les.kind:6} #{les.attempt}: {les.what} — {les.why}", markup=False)


@wiki_app.command()
def distill(
    run: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="run folder, runs/<op>/<run-id>")],
    out: Annotated[Path | None, typer.Option(metavar="DIR",
                                             help="write drafts here (never inside wiki/); default: print")] = None,
) -> None:
    """Propose new or updated cards from a run's lessons, for a person to review."""
    run_dir = _run_dir(run)
    wiki = wiki_dir().resolve()
    if out is not None and (out.resolve() == wiki or wiki in out.resolve().parents):
        raise AkaError(f"--out {out} is inside wiki/: drafts are reviewed first; pick another folder")
    drafts = distill_drafts(load_lessons(run_dir), f"{run_dir.parent.name}/{run_dir.name}", {c.id for c in load_wiki()})
    if not drafts:
        console.print("no lessons with anything to propose in this run")
        return
    for d in drafts:
        if out is None:
            console.rule(f"{d.action}: {d.card_id} -> {d.relpath}")
            console.print(d.text, markup=False, highlight=False)
        else:
            path = out / (f"{d.card_id}.md" if d.action == "new" else f"{d.card_id}.update.md")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(d.text, encoding="utf-8")
            console.print(f"{d.action:6} {path}")


def _hardware_pages(pages: list) -> dict[str, Any]:
    """Device name (as a page lists it) -> its hardware page."""
    return {n: c for c in pages if c.meta.kind == "hardware" for n in c.meta.names}


def hw(
    name: str | None = typer.Option(None, metavar="NAME", help="a device name, e.g. 'NVIDIA H200': what aka knows "
                                    "of that part, as on such a GPU (works without one)"),
    capability: str | None = typer.Option(None, metavar="X.Y", help="with --name: the compute capability "
                                          "[default: its page's, else 9.0]"),
    as_json: bool = typer.Option(False, "--json", help="print the merged facts as JSON"),
) -> None:
    """Detected hardware merged with its wiki page; parts without a page are reported unknown.

    \b
    Examples:
      aka hw
      aka hw --name 'NVIDIA H200'
    """
    pages = load_wiki()
    named = _hardware_pages(pages)
    if name:
        page = {" ".join(n.split()).casefold(): c for n, c in named.items()}.get(" ".join(name.split()).casefold())
        cap = capability or (page.meta.capability if page is not None else None) or "9.0"
        facts = merge(Detected(name=name, capability=cap), pages)
    else:
        facts = detect(pages)
    if as_json:
        print(json.dumps(facts.summary(), indent=1, default=str))
        return
    if facts.detected is None:  # no GPU: nothing to tabulate; say what the command is for and what works here
        known = ", ".join(f"'{n}'" for n in sorted(named))
        example = f" To read a known part's facts here: aka hw --name {sorted(named)[0]!r} (pages: {known})." \
            if named else ""
        console.print(f"{facts.reason}. On a GPU, aka hw lists what the device reports (SMs, L2, shared memory, "
                      f"registers) merged with its wiki page.{example}", soft_wrap=True, markup=False, highlight=False)
        return
    colour = "green" if facts.known else "yellow"
    console.print(f"[{colour}]{'known' if facts.known else 'UNKNOWN'}[/{colour}]: {facts.reason}", soft_wrap=True)
    table = Table(show_header=True)
    for col in ("fact", "value", "kind", "source"):
        table.add_column(col)
    for k, v in facts.detected.model_dump().items():
        if name and v is None:  # a hypothetical device reports nothing but its name and capability
            continue
        origin = "--name (hypothetical)" if name else "torch / nvidia-smi"
        table.add_row(k, str(v) if v is not None else "—", "device", origin)
    for k, f in facts.facts.items():
        table.add_row(k, str(f.value), f.kind, f.source)
    console.print(table)
    for m in facts.mismatches:
        console.print(f"[red]mismatch[/red] {m}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(wiki_app, name="wiki")
    app.command("hw")(hw)

