"""Loading and checking wiki/: parse front matter, validate, enforce ids, folders and sources.

`load_wiki` fails fast on the first bad page (one line naming file and field); `check_wiki`
collects every problem so `aka wiki check` can list them all at once.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from aka.contract.spec import yaml_mapping
from aka.errors import AkaError
from aka.wiki.model import FOLDERS, Card, CardMeta


class WikiError(AkaError):
    """A wiki page is malformed, or an id is unknown."""


_FENCE = "---"
# A quantitative claim in prose: a number with a unit that only a source can justify.
_CLAIM = re.compile(r"\d[\d.,]*\s*(?:TFLOP/s|TFLOPS|GFLOP|TB/s|GB/s|µs|us\b|ms\b|MB\b|KB\b|KiB|MiB|%|×)")


def wiki_dir(root: Path | None = None) -> Path:
    from aka.contract.ops import project_root

    return (root or project_root()) / "wiki"


def _one_line(path: Path, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    msg = first["msg"].removeprefix("Value error, ")
    return f"{path}: field '{loc}': {msg}{more}"


def parse_page(path: Path) -> Card:
    """One page -> Card; any problem raises WikiError with one line naming the file and field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WikiError(f"{path}: cannot read: {exc.strerror}") from None
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != _FENCE:
        raise WikiError(f"{path}: field '(front matter)': the file must start with a '---' YAML block")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == _FENCE)
    except StopIteration:
        raise WikiError(f"{path}: field '(front matter)': no closing '---' line") from None
    raw = yaml_mapping("".join(lines[1:end]), path, WikiError, ": front matter", first_line=2,
                       field="(front matter)", noun="fields")
    try:
        meta = CardMeta.model_validate(raw)
    except ValidationError as exc:
        raise WikiError(_one_line(path, exc)) from None
    return Card(meta=meta, body="".join(lines[end + 1 :]), path=path)


def _page_problems(card: Card, known_ops: set[str] | None) -> list[str]:
    p, m = card.path, card.meta
    out = []
    if m.id != p.stem:
        out.append(f"{p}: field 'id': expected '{p.stem}' (the file name), got '{m.id}'")
    if p.parent.name != FOLDERS[m.kind]:
        out.append(f"{p}: field 'kind': a {m.kind} page belongs in wiki/{FOLDERS[m.kind]}/")
    if known_ops is not None:
        for op in m.ops:
            if op not in known_ops:
                out.append(f"{p}: field 'ops': unknown op '{op}'; known: {', '.join(sorted(known_ops))}")
    claim = _CLAIM.search(card.body)
    if claim and not m.sources:
        out.append(f"{p}: field 'sources': the body quotes '{claim.group(0)}' but the page lists no source")
    if m.kind != "hardware" and not card.body.strip():
        out.append(f"{p}: field '(body)': empty card")
    return out


def _pages(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.md"))


def check_wiki(root: Path, known_ops: set[str] | None = None) -> tuple[list[Card], list[str]]:
    """Validate every page under root; return the good cards and one line per problem."""
    cards: list[Card] = []
    problems: list[str] = []
    if not root.is_dir():
        return [], [f"{root}: no wiki folder: create wiki/techniques/ etc. or set AKA_ROOT"]
    for path in _pages(root):
        try:
            card = parse_page(path)
        except WikiError as err:
            problems.append(str(err))
            continue
        problems.extend(_page_problems(card, known_ops))
        cards.append(card)
    seen: dict[str, Path] = {}
    for card in cards:
        if card.id in seen:
            problems.append(f"{card.path}: field 'id': duplicate id '{card.id}' (also in {seen[card.id]})")
        seen.setdefault(card.id, card.path)
    return cards, problems


def load_wiki(root: Path | None = None) -> list[Card]:
    """All cards, validated; the first problem raises WikiError (run `aka wiki check` for the list)."""
    cards, problems = check_wiki(root or wiki_dir())
    if problems:
        more = f" (+{len(problems) - 1} more; run `aka wiki check`)" if len(problems) > 1 else ""
        raise WikiError(problems[0] + more)
    return cards


def get_card(cards: list[Card], card_id: str) -> Card:
    for card in cards:
        if card.id == card_id:
            return card
    near = sorted(c.id for c in cards if card_id.split("-")[0] in c.id)[:5]
    hint = f"; similar: {', '.join(near)}" if near else "; list ids with `aka wiki search ''`"
    raise WikiError(f"unknown wiki id '{card_id}'{hint}")
