"""Deterministic retrieval: BM25 over fields with weights, filters by op and arch, a prompt budget.

Why BM25 and not embeddings: cards are few (tens), vocabulary is technical and shared between
queries and tags ("split kv", "paged", "gqa"), results must be reproducible in tests and runs,
and there is no network on the device machine.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from aka.wiki.model import Card

# Field weights: a word in the title or tags says what the card is about; the body only mentions.
_WEIGHTS = {"id": 2.0, "title": 3.0, "tags": 3.0, "ops": 1.0, "body": 1.0}
_K1, _B = 1.2, 0.75
_OP_BOOST = 1.5  # the card names the requested op
_TAG_BOOST = 2.0  # per requested tag word the card carries (BM25 scores run about 2-30)
_STOP = {"a", "an", "the", "of", "and", "or", "to", "in", "on", "for", "with", "is", "it", "by", "as", "at", "be"}
_SUFFIXES = ("ing", "ed", "es", "s", "e")


def _stem(word: str) -> str:
    for suf in _SUFFIXES:
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            return word[: -len(suf)]
    return word


def tokens(text: str) -> list[str]:
    """Lower-case alphanumeric words, light suffix stripping ("decoding" ~ "decode")."""
    return [_stem(w) for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP]


def _fields(card: Card) -> dict[str, list[str]]:
    m = card.meta
    return {
        "id": tokens(m.id),
        "title": tokens(m.title),
        "tags": tokens(" ".join(m.tags)),
        "ops": tokens(" ".join(m.ops)),
        "body": tokens(card.body),
    }


def applies(card: Card, op: str | None, arch: str | None) -> bool:
    """A card with no ops (or no arch) is general and always applies; otherwise it must name them."""
    if op and card.meta.ops and op not in card.meta.ops:
        return False
    if arch:
        base = arch.rstrip("a")
        if card.meta.arch and not any(a.rstrip("a") == base for a in card.meta.arch):
            return False
    return True


@dataclass(frozen=True)
class Hit:
    card: Card
    score: float


def rank(
    cards: list[Card], query: str, op: str | None = None, arch: str | None = None, tags: tuple[str, ...] = ()
) -> list[Hit]:
    """Cards that apply, best first; ties broken by id so the order never depends on file order."""
    pool = [c for c in cards if applies(c, op, arch)]
    if not pool:
        return []
    docs = [_fields(c) for c in pool]
    n = len(pool)
    avg = {f: (sum(len(d[f]) for d in docs) / n) or 1.0 for f in _WEIGHTS}
    df: Counter[str] = Counter()
    for d in docs:
        df.update({t for f in _WEIGHTS for t in d[f]})
    q = tokens(query)
    want_tags = {t for tag in tags for t in tokens(tag)}
    hits = []
    for card, d in zip(pool, docs):
        score = 0.0
        for term in q:
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            for field, w in _WEIGHTS.items():
                tf = d[field].count(term)
                if tf:
                    norm = tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * len(d[field]) / avg[field]))
                    score += w * idf * norm
        if want_tags:
            score += _TAG_BOOST * len(want_tags & set(d["tags"]))
        if op and op in card.meta.ops:
            score *= _OP_BOOST
        if score > 0 or not q:
            hits.append(Hit(card, score))
    hits.sort(key=lambda h: (-h.score, h.card.id))
    return hits


def retrieve(
    cards: list[Card],
    query: str,
    op: str | None = None,
    arch: str | None = None,
    tags: tuple[str, ...] = (),
    budget_chars: int | None = None,
    kinds: tuple[str, ...] = (),
) -> list[Card]:
    """Best cards first, as many as fit in budget_chars of prompt text (None: no limit)."""
    out: list[Card] = []
    used = 0
    for hit in rank(cards, query, op, arch, tags):
        if kinds and hit.card.meta.kind not in kinds:
            continue
        size = len(hit.card.prompt_text())
        if budget_chars is not None and used + size > budget_chars:
            continue  # a later, shorter card may still fit; order stays by rank
        out.append(hit.card)
        used += size
    return out


def cards_for_plan(
    cards: list[Card], op: str, arch: str | None, evidence_tags: tuple[str, ...] = (), budget: int = 12000
) -> list[Card]:
    """What a planner should read for op on arch: its op-note, then techniques and anti-patterns
    ranked by the op name and the evidence (e.g. 'memory-bound', 'low-occupancy'), within budget."""
    query = " ".join((op.replace("_", " "), *evidence_tags))
    notes = [c for c in cards if c.meta.kind == "op-note" and op in c.meta.ops]
    rest_budget = budget - sum(len(c.prompt_text()) for c in notes)
    ranked = retrieve(
        cards, query, op=op, arch=arch, tags=evidence_tags, budget_chars=max(rest_budget, 0),
        kinds=("technique", "anti-pattern"),
    )
    return notes + ranked


def render(cards: list[Card]) -> str:
    """Cards joined for a prompt; each keeps its id so the plan can cite it."""
    return "\n".join(c.prompt_text() for c in cards)
