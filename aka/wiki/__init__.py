"""The GPU wiki: hardware pages, technique cards, anti-patterns and op notes under wiki/.

Plans cite card ids; `aka wiki stats` reads the runs to show which cards paid off.
"""

from aka.knowledge.wiki.load import WikiError, check_wiki, get_card, load_wiki, parse_page, wiki_dir
from aka.knowledge.wiki.model import Card, CardMeta, Fact, Facts
from aka.knowledge.wiki.search import cards_for_plan, rank, render, retrieve

__all__ = [
    "Card", "CardMeta", "Fact", "Facts", "WikiError", "cards_for_plan", "check_wiki", "get_card",
    "load_wiki", "parse_page", "rank", "render", "retrieve", "wiki_dir",
]
