"""A kernel file as it was at an earlier commit, imported as a module, for bit-for-bit comparisons.

Read from git history rather than kept as a copy in the tree (a copy rots and duplicates the
kernel); where the checkout has no such history (a shallow clone), the comparison is skipped
with that reason."""

from __future__ import annotations

import importlib.util
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_at(rev: str, path: str, name: str):
    got = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"{path} at {rev} is not in this checkout's history (shallow clone?): {got.stderr.strip()[:120]}")
    tmp = Path(tempfile.mkdtemp(prefix="aka-pre-")) / f"{name}.py"
    tmp.write_text(got.stdout)
    spec = importlib.util.spec_from_file_location(name, tmp)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_LOADED: dict[tuple[str, str], object] = {}


def old_baseline(op: str, rev: str = "34a95c1"):
    """kernels/<op>/baseline.py at rev, loaded once per process."""
    key = (op, rev)
    if key not in _LOADED:
        _LOADED[key] = load_at(rev, f"kernels/{op}/baseline.py", f"{op}_at_{rev}")
    return _LOADED[key]


def run_both(new, old, entry: str, x: dict, cfg: dict | None = None, **kw):
    """entry(**x, **kw) of both modules with cfg laid over each CONFIG, which is restored after."""
    saved = dict(new.CONFIG), dict(old.CONFIG)
    try:
        if cfg:
            new.CONFIG.update(cfg)
            old.CONFIG.update(cfg)
        return getattr(new, entry)(**x, **kw), getattr(old, entry)(**x, **kw)
    finally:
        for m, c in zip((new, old), saved):
            m.CONFIG.clear()
            m.CONFIG.update(c)
