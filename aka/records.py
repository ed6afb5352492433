"""Where a run's records are and how they are read back: runs/<op>/<run-id>/ with run.json and
attempts.jsonl. Below every stage, so a later reader (a replay backend, a report) and the run stage
that writes them (aka.run.store) share one reading.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aka.errors import AkaError


class UnknownRunError(AkaError):
    """A run id that has no directory under runs/."""


def find_run(runs_root: Path, run_id: str) -> Path:
    hits = [p for p in runs_root.glob(f"*/{run_id}") if (p / "run.json").is_file()] if run_id else []
    if not hits:
        raise UnknownRunError(f"unknown run '{run_id}'; `aka runs` lists the runs under {runs_root}")
    return hits[0]


def read_attempts(run_dir: Path) -> list[dict[str, Any]]:
    """The finished attempts, in order; a torn final line is ignored."""
    log = run_dir / "attempts.jsonl"
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # only the last line can be torn: appends are sequential
    return out
