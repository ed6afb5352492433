"""`aka show RUN --attempt N`: the command side of aka.report.attempt_view (the text is built there).

aka/cli/runs.py's `show` calls show_attempt when --attempt is given; this module registers no command
of its own."""

from __future__ import annotations

import sys

from aka.contract.ops import project_root
from aka.records import find_run

ATTEMPT_HELP = ("one attempt in full: its plan, the edit as a unified diff against the incumbent it was "
                "measured against, its tool calls, tokens and cost, model exchanges and decision")


def show_attempt(run_id: str, n: int) -> None:
    """Print attempt n of the run; an unknown run or attempt number is one line (AkaError)."""
    from aka.report.attempt_view import attempt_text

    sys.stdout.write(attempt_text(find_run(project_root() / "runs", run_id), n))
