"""Fixtures for the wiki tests: the project's real wiki, and a scratch wiki to break on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from aka.contract.ops import op_names, project_root
from aka.wiki import check_wiki, load_wiki


@pytest.fixture(scope="session")
def cards():
    return load_wiki(project_root() / "wiki")


@pytest.fixture(scope="session")
def known_ops():
    return set(op_names())


@pytest.fixture
def scratch(tmp_path: Path):
    """A writable wiki root with the four folders; write(relpath, text) adds a page."""
    root = tmp_path / "wiki"
    for d in ("hardware", "techniques", "anti-patterns", "op-notes"):
        (root / d).mkdir(parents=True)

    def write(rel: str, text: str) -> Path:
        p = root / rel
        p.write_text(text)
        return p

    write.root = root  # type: ignore[attr-defined]
    write.check = lambda: check_wiki(root, {"gdn_prefill", "fa4_decode"})  # type: ignore[attr-defined]
    return write
