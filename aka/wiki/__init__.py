"""The GPU wiki: hardware pages, technique cards, anti-patterns and op notes under wiki/; their
format (model), loader and retrieval (search). Below the stages: the hardware facts (aka.hardware)
that the evaluator's speed-of-light floor reads come from its pages. Plans cite card ids;
aka.knowledge.wiki_stats reads the runs to show which cards paid off (`aka wiki stats`).
"""

from aka.wiki.load import WikiError, check_wiki, get_card, load_wiki, parse_page, wiki_dir
from aka.wiki.model import Card, CardMeta, Fact, Facts
from aka.wiki.search import cards_for_plan, rank, render, retrieve

__all__ = [
    "Card", "CardMeta", "Fact", "Facts", "WikiError", "cards_for_plan", "check_wiki", "get_card",
    "load_wiki", "parse_page", "rank", "render", "retrieve", "wiki_dir",
]
