"""Files replaced whole: a reader beside the writer, or a process killed mid-write, finds the old text or
the new one, never a torn file (a torn promoted.py once read as someone's uncommitted edit)."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str, *, durable: bool = False) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`. durable: fsync first, so
    the new text also survives a power loss (the run record)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_if_changed(path: Path, text: str) -> None:
    """write_atomic unless `path` already holds `text` (its mtime then stays, and so do caches keyed on it)."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    write_atomic(path, text)
