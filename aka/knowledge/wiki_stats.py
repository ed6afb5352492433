"""`aka wiki stats`: which cards the plans cited, and how the candidates they led to fared."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aka.knowledge.lessons import read_attempts, view


@dataclass
class CardStats:
    card_id: str
    cited: int = 0
    passed_gate: int = 0
    promoted: int = 0
    runs: set[str] = field(default_factory=set)

    @property
    def payoff(self) -> float:
        """Promotions per citation: the share of candidates built on this card that won."""
        return self.promoted / self.cited if self.cited else 0.0


def run_logs(runs_root: Path) -> list[Path]:
    """Every runs/<op>/<run-id>/attempts.jsonl (or runs_root itself when it is one run)."""
    if (runs_root / "attempts.jsonl").is_file():
        return [runs_root / "attempts.jsonl"]
    return sorted(runs_root.glob("*/*/attempts.jsonl"))


def card_stats(logs: list[Path]) -> dict[str, CardStats]:
    stats: dict[str, CardStats] = {}
    for log in logs:
        run = f"{log.parent.parent.name}/{log.parent.name}"
        for i, rec in enumerate(read_attempts(log)):
            v = view(rec, i)
            for cid in dict.fromkeys(v.cited_wiki):  # a card cited twice in one plan counts once
                s = stats.setdefault(cid, CardStats(cid))
                s.cited += 1
                s.passed_gate += bool(v.passed_gate)
                s.promoted += v.promoted
                s.runs.add(run)
    return stats


def ordered(stats: dict[str, CardStats]) -> list[CardStats]:
    """Most promotions first, then payoff, then citations; ties by id."""
    return sorted(stats.values(), key=lambda s: (-s.promoted, -s.payoff, -s.cited, s.card_id))
