"""A kernel module's CONFIG literal read from its source, without importing it: the knobs the loop's
search, its knowledge and `aka bench --impl NAME+KEY=VALUE` name."""

from __future__ import annotations

import ast
import functools
import pprint
from typing import Any


@functools.lru_cache(maxsize=64)
def config_span(source: str) -> tuple[int, int, dict[str, Any] | None] | None:
    """(first line, last line, literal value or None) of the module-level CONFIG assignment; None
    without one. Read once per source: a template is ~80 kB of Python, a tenth of a second to parse."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    for node in body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CONFIG" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                value = None
            return node.lineno, node.end_lineno or node.lineno, dict(value) if isinstance(value, dict) else None
    return None


def config_of(source: str) -> dict[str, Any] | None:
    """The source's module-level CONFIG literal, or None when it has none (or not a literal dict)."""
    span = config_span(source)
    return None if span is None or span[2] is None else dict(span[2])


def render(source: str, config: dict[str, Any]) -> str:
    """The source with its CONFIG literal replaced by `config`, everything else byte-identical (how the
    offline search writes a candidate, and how a promotion stored as CONFIG changes becomes a module).
    ValueError when the source has no module-level CONFIG assignment."""
    span = config_span(source)
    if span is None:
        raise ValueError("no module-level CONFIG = {...} to substitute")
    lines = source.splitlines(keepends=True)
    body = pprint.pformat(config, sort_dicts=False, width=100)
    new = f"CONFIG = {body}  # rendered by aka's offline search\n"
    return "".join(lines[: span[0] - 1]) + new + "".join(lines[span[1]:])

