"""Search/replace edits in a model's answer, applied to the module they were written against.

A codegen or repair answer may carry, instead of the whole module, one or more blocks

    <<<<<<< SEARCH
    (exact lines of the current module)
    =======
    (their replacement)
    >>>>>>> REPLACE

applied in order, each to the result of the ones before. A one-value CONFIG change then costs a few
hundred output tokens instead of re-emitting a 39 kB module. A block whose SEARCH text is not found
exactly once is an EditError naming the block and why, which the repair turn shows the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aka.errors import AkaError

_BLOCK = re.compile(
    r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*\n(.*?)^[ \t]*={5,9}[ \t]*\n(.*?)^[ \t]*>{5,9}[ \t]*REPLACE[ \t]*$",
    re.S | re.M,
)
_OPEN = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH", re.M)


class EditError(AkaError):
    """An edit that cannot be applied; the message names the block and the reason, in one line."""


@dataclass(frozen=True)
class Edit:
    search: str
    replace: str


def parse_edits(text: str) -> list[Edit]:
    """The answer's SEARCH/REPLACE blocks in order; [] when it has none (a whole-module answer).

    A SEARCH marker without its ======= and REPLACE markers is an EditError (an answer cut short
    or malformed), not a silent fall back to reading the answer as a module."""
    edits = [Edit(s, r) for s, r in _BLOCK.findall(text)]
    opened = len(_OPEN.findall(text))
    if opened != len(edits):
        raise EditError(f"{opened} SEARCH marker(s) but {len(edits)} complete block(s): each block needs "
                        "'<<<<<<< SEARCH', '=======' and '>>>>>>> REPLACE' on lines of their own")
    return edits


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:80]


def apply_edits(source: str, edits: list[Edit]) -> str:
    """source with every edit applied in order; EditError on the first that matches 0 or 2+ times."""
    for i, e in enumerate(edits, 1):
        if not e.search.strip():
            raise EditError(f"edit {i} of {len(edits)}: empty SEARCH text (quote the exact lines to replace)")
        at = _line_starts(source, e.search)
        n = len(at)
        if n != 1:
            where = "is not in the module" if n == 0 else f"occurs {n} times (quote more lines to make it unique)"
            raise EditError(f"edit {i} of {len(edits)}: SEARCH text starting {_first_line(e.search)!r} {where}; "
                            "copy the lines exactly, whitespace included")
        source = source[: at[0]] + e.replace + source[at[0] + len(e.search) :]
    return source


def _line_starts(source: str, text: str) -> list[int]:
    """Where text occurs starting at a line's beginning: SEARCH quotes whole lines, so a shorter
    indentation must not match inside a longer one."""
    found, i = [], source.find(text)
    while i >= 0:
        if i == 0 or source[i - 1] == "\n":
            found.append(i)
        i = source.find(text, i + 1)
    return found


def compact_diff(old: str, new: str, max_lines: int = 8, width: int = 160) -> str:
    """The lines ``new`` changed against ``old`` as '-old | +new' (what an attempts history shows of an
    edit); a rewrite of more than ``max_lines`` lines is summarised after the first ones."""
    import difflib

    if old == new:
        return "(no change)"
    changed = [ln for ln in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
               if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    shown = [" ".join(ln.split())[:width] for ln in changed[:max_lines]]
    more = len(changed) - len(shown)
    return " | ".join(shown) + (f" | ... (+{more} more changed lines)" if more else "")
