"""Promotion in git: kernels/<op>/promoted.py + promoted.json committed alone; history; rollback.

Git history is the kernel's version history. A promotion commit holds only the two promoted files
(`git commit --only`), so whatever else the user has staged or edited stays out of it; aka refuses
to overwrite promoted files that carry uncommitted edits, since those edits would be lost.

A promoted kernel that is baseline.py with other CONFIG values (what the offline search promotes)
is kept as those values in promoted.json (`over_baseline`), with no promoted.py: a copy of the
baseline's code would drift from it. The op renders it when it is needed
(aka.contract.ops.Op.promoted_kernel); when baseline.py's code changes, the values apply to the new
code, `aka regress` says whether they still win and the loop's set-up re-measures them.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from aka.contract.files import write_if_changed
from aka.contract.module_config import config_of, render
from aka.contract.ops import get_op
from aka.errors import AkaError
from aka.knowledge.measured import changes_from, template_hash
from aka.records import ConfigPromotion, Promoted


class GitError(AkaError):
    """A git step failed or the promoted files are in a state aka must not overwrite."""


def _git(root: Path, *args: str, check: bool = True) -> str:
    for _ in range(20):  # another git (or one orphaned by a killed aka) may hold the index lock briefly
        proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        if proc.returncode == 0 or "index.lock" not in proc.stderr:
            break
        time.sleep(0.5)
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:2])} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return proc.stdout


def promoted_paths(root: Path, op: str) -> tuple[str, str]:
    """The promoted kernel and its record, relative to root: where the op's contract puts the kernel
    (modules.promoted), the record beside it."""
    py = get_op(op, root).spec.modules.promoted
    return py, str(Path(py).with_suffix(".json"))


def is_repo(root: Path) -> bool:
    return subprocess.run(["git", "rev-parse", "--git-dir"], cwd=root, capture_output=True).returncode == 0


def check_clean(root: Path, op: str, ours: str | None = None, earlier: tuple[str, ...] = ()) -> None:
    """Raise when the promoted files have uncommitted edits (staged or not).

    `ours`: the source being promoted; a working copy already equal to it is our own write that a
    kill interrupted before the commit, so it is not someone's edit. `earlier`: what this run
    promoted before without committing (--no-commit), which it may replace.
    """
    if not is_repo(root):
        return
    current = promoted_source(root, op)
    if current is not None and current in {s for s in (ours, *earlier) if s is not None}:
        return
    dirty = [ln for ln in _git(root, "status", "--porcelain", "--untracked-files=all", "--",
                                *promoted_paths(root, op)).splitlines() if ln.strip()]
    if dirty:
        files = ", ".join(line[3:] for line in dirty)
        raise GitError(
            f"{files} has uncommitted edits; commit or discard them (git checkout -- {files}) before promoting"
        )


def promoted_source(root: Path, op: str) -> str | None:
    """The promoted kernel's source as the files on disk give it (promoted.py, or baseline.py with
    promoted.json's CONFIG values); None when nothing is promoted."""
    path = get_op(op, root).promoted_kernel()
    return path.read_text() if path is not None else None


def as_config_promotion(baseline: str, source: str) -> ConfigPromotion | None:
    """`source` as CONFIG values over `baseline` when that is all it is: the same code outside CONFIG
    and, rendered back, byte-identical (so the promoted kernel keeps its code hash); else None."""
    base_config, config, code = config_of(baseline), config_of(source), template_hash(baseline)
    if base_config is None or config is None or code != template_hash(source):
        return None
    changes = changes_from(base_config, config)
    if render(baseline, {**base_config, **changes}) != source:  # also refuses a key the source dropped
        return None
    return ConfigPromotion(baseline_code=code, changes=changes)


def write_promoted(root: Path, op: str, source: str, meta: Promoted) -> None:
    """promoted.json, and promoted.py unless the source is baseline.py with other CONFIG values."""
    py, js = promoted_paths(root, op)
    over = as_config_promotion(get_op(op, root).path("baseline").read_text(), source)
    meta = meta.model_copy(update={"over_baseline": over})
    if over is None:
        write_if_changed(root / py, source)
    else:
        (root / py).unlink(missing_ok=True)
    write_promoted_meta(root, op, meta)


def write_promoted_meta(root: Path, op: str, meta: Promoted) -> Path:
    path = root / promoted_paths(root, op)[1]
    write_if_changed(path, meta.to_json())
    return path


def config_promotion_drift(root: Path, op: str) -> str | None:
    """When the promotion is kept as CONFIG values and baseline.py's code (or its CONFIG keys) changed
    since: one line saying so; None otherwise (a promoted.py, nothing promoted, nothing changed)."""
    meta = read_promoted_meta(root, op)
    if meta is None or meta.over_baseline is None or (root / promoted_paths(root, op)[0]).is_file():
        return None
    base = get_op(op, root).path("baseline").read_text()
    now, keys = template_hash(base), set(config_of(base) or {})
    lost = sorted(set(meta.over_baseline.changes) - keys)
    if now == meta.over_baseline.baseline_code and not lost:
        return None
    parts = [f"baseline.py's code changed since the promotion ({meta.over_baseline.baseline_code} -> {now})"]
    if lost:
        parts.append(f"its CONFIG no longer has {', '.join(lost)} (left out)")
    values = ", ".join(f"{k}={v}" for k, v in meta.over_baseline.changes.items() if k in keys)
    return "; ".join(parts) + f": the promoted values ({values or 'none left'}) apply to the new code"


def read_promoted_meta(root: Path, op: str) -> Promoted | None:
    """The promoted.json on disk; None when there is none or it is not a JSON object."""
    try:
        return Promoted.parse((root / promoted_paths(root, op)[1]).read_text())
    except OSError:
        return None


def _known(root: Path, paths: tuple[str, ...]) -> tuple[str, ...]:
    """The paths git can add or commit: on disk, or tracked (a deletion to record)."""
    tracked = set(_git(root, "ls-files", "--", *paths).splitlines())
    return tuple(p for p in paths if (root / p).exists() or p in tracked)


def commit_promoted(root: Path, op: str, message: str, extra: tuple[str, ...] = ()) -> str:
    """Commit only the promoted files (and `extra`: the op's knowledge.json); returns the new commit id."""
    paths = _known(root, (*promoted_paths(root, op), *extra))
    _git(root, "add", "--", *paths)
    staged = subprocess.run(["git", "diff", "--cached", "--quiet", "--", *paths], cwd=root).returncode
    if staged == 0:  # identical to HEAD: a resumed promotion whose commit already happened
        return last_commit(root, op) or _git(root, "rev-parse", "HEAD").strip()
    _git(root, "commit", "--only", "-m", message, "--", *paths)
    return _git(root, "rev-parse", "HEAD").strip()


def promote(root: Path, op: str, source: str, meta: Promoted, message: str, commit: bool,
            earlier: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> str | None:
    """Write (and unless commit=False, commit) a promoted kernel; refuses over uncommitted edits
    other than this run's own earlier promotions (`earlier`, sources)."""
    if commit and not is_repo(root):
        raise GitError(f"{root} is not a git repository; use --no-commit to write the kernel without committing")
    check_clean(root, op, ours=source, earlier=earlier)
    write_promoted(root, op, source, meta)
    return commit_promoted(root, op, message, extra) if commit else None


def commit_paths(root: Path, paths: tuple[str, ...], message: str) -> str | None:
    """Commit exactly these files (`aka optimize --record-knowledge`); None when they equal HEAD."""
    if not is_repo(root):
        raise GitError(f"{root} is not a git repository: nothing to commit the knowledge into")
    _git(root, "add", "--", *paths)
    if subprocess.run(["git", "diff", "--cached", "--quiet", "--", *paths], cwd=root).returncode == 0:
        return None
    _git(root, "commit", "--only", "-m", message, "--", *paths)
    return _git(root, "rev-parse", "HEAD").strip()


def last_commit(root: Path, op: str) -> str | None:
    """The last commit that touched the promoted kernel, if any."""
    if not is_repo(root):
        return None
    return _git(root, "log", "-1", "--format=%H", "--", *promoted_paths(root, op)).strip() or None


@dataclass
class Promotion:
    rev: str
    date: str
    subject: str
    meta: Promoted  # empty where the commit's promoted.json is missing or unreadable
    present: bool = True  # False: this commit removed the promoted kernel (the op is back on its baseline)


def history(root: Path, op: str) -> list[Promotion]:
    """Commits that changed kernels/<op>/promoted.py or promoted.json, newest first, with their
    promoted.json."""
    if not is_repo(root):
        raise GitError(f"{root} is not a git repository: no promotion history")
    py, js = promoted_paths(root, op)
    out = []
    for line in _git(root, "log", "--format=%H%x09%ad%x09%s", "--date=iso", "--", py, js).splitlines():
        rev, date, subject = line.split("\t", 2)
        raw = _git(root, "show", f"{rev}:{js}", check=False)
        meta = (Promoted.parse(raw) if raw else None) or Promoted()
        present = _exists_at(root, rev, py) or meta.over_baseline is not None
        out.append(Promotion(rev, date, subject, meta, present))
    return out


def _exists_at(root: Path, rev: str, path: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{rev}:{path}"], cwd=root, capture_output=True).returncode == 0


def rollback(root: Path, op: str, to: str | None = None) -> str:
    """Restore the promoted kernel of revision `to` (default: the one before HEAD's) as a new commit.

    When that revision has no promoted kernel (rolling back past the first promotion), the promoted
    files are removed, so the op falls back to its baseline.
    """
    check_clean(root, op)
    entries = history(root, op)
    if not entries:
        raise GitError(f"{op} has no promotions to roll back")
    if to is None:
        target = entries[1].rev if len(entries) > 1 else f"{entries[0].rev}~1"
    else:
        target = _git(root, "rev-parse", "--verify", "--quiet", f"{to}^{{commit}}", check=False).strip()
        if not target:
            raise GitError(f"unknown revision '{to}'; `aka history {op}` lists the promotions")
    py, js = promoted_paths(root, op)
    src = subprocess.run(["git", "show", f"{target}:{py}"], cwd=root, capture_output=True, text=True)
    meta = _git(root, "show", f"{target}:{js}", check=False)
    kept = Promoted.parse(meta) if meta else None
    if src.returncode == 0 or (kept is not None and kept.over_baseline is not None):
        if src.returncode == 0:
            (root / py).write_text(src.stdout)
        else:  # kept as CONFIG values over baseline.py at that revision
            (root / py).unlink(missing_ok=True)
        (root / js).write_text(meta or "{}\n")
        label = target[:10]
    else:
        (root / py).unlink(missing_ok=True)
        (root / js).unlink(missing_ok=True)
        label = "baseline"
    paths = _known(root, (py, js))
    _git(root, "add", "--", *paths)
    _git(root, "commit", "--only", "-m", f"{op}: roll back promoted kernel to {label}", "--", *paths)
    return _git(root, "rev-parse", "HEAD").strip()
