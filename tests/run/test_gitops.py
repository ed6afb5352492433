"""Promotion in a real temporary git repository: only the two files, refusal when dirty, history, rollback."""

from __future__ import annotations

import subprocess

import pytest

from aka.records import Promoted
from aka.run import gitops


def git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def test_promotion_commits_only_the_promoted_files(project):
    (project / "notes.txt").write_text("user work in progress")
    git(project, "add", "notes.txt")  # staged by the user: must stay out of the promotion commit
    rev = gitops.promote(project, "gdn_prefill", "# v1\n", Promoted(code_hash="a1"), "gdn_prefill: promote v1", True)
    files = git(project, "show", "--name-only", "--format=", rev).split()
    assert sorted(files) == ["kernels/gdn_prefill/promoted.json", "kernels/gdn_prefill/promoted.py"]
    assert "notes.txt" in git(project, "diff", "--cached", "--name-only")


def test_refuses_uncommitted_edits_to_promoted_files(project):
    gitops.promote(project, "gdn_prefill", "# v1\n", Promoted(code_hash="a1"), "v1", True)
    (project / "kernels/gdn_prefill/promoted.py").write_text("# hand edit\n")
    with pytest.raises(gitops.GitError, match="uncommitted edits.*promoted.py"):
        gitops.promote(project, "gdn_prefill", "# v2\n", Promoted(), "v2", True)
    assert (project / "kernels/gdn_prefill/promoted.py").read_text() == "# hand edit\n"


def test_no_commit_writes_without_committing(project):
    head = git(project, "rev-parse", "HEAD")
    assert gitops.promote(project, "gdn_prefill", "# v1\n", Promoted(code_hash="a1"), "v1", commit=False) is None
    assert git(project, "rev-parse", "HEAD") == head
    assert (project / "kernels/gdn_prefill/promoted.py").read_text() == "# v1\n"


def test_history_and_rollback(project):
    for i in (1, 2, 3):
        gitops.promote(project, "gdn_prefill", f"# v{i}\n", Promoted(code_hash=f"h{i}"), f"promote v{i}", True)
    hist = gitops.history(project, "gdn_prefill")
    assert [h.meta.code_hash for h in hist] == ["h3", "h2", "h1"]
    gitops.rollback(project, "gdn_prefill")  # default: the promotion before the current one
    assert (project / "kernels/gdn_prefill/promoted.py").read_text() == "# v2\n"
    gitops.rollback(project, "gdn_prefill", to=hist[2].rev)
    assert (project / "kernels/gdn_prefill/promoted.py").read_text() == "# v1\n"
    assert git(project, "status", "--porcelain") == ""
    assert len(gitops.history(project, "gdn_prefill")) == 5  # rollbacks are new commits, nothing rewritten
    with pytest.raises(gitops.GitError, match="unknown revision"):
        gitops.rollback(project, "gdn_prefill", to="deadbeef")


def test_rollback_past_the_first_promotion_returns_to_the_baseline(project):
    gitops.promote(project, "gdn_prefill", "# v1\n", Promoted(code_hash="h1"), "promote v1", True)
    gitops.rollback(project, "gdn_prefill")
    assert not (project / "kernels/gdn_prefill/promoted.py").exists()
    assert "roll back promoted kernel to baseline" in git(project, "log", "-1", "--format=%s")


def test_no_commit_run_may_replace_its_own_earlier_promotion_but_not_an_edit(project):
    gitops.promote(project, "gdn_prefill", "# v1\n", Promoted(code_hash="a1"), "v1", commit=False)
    gitops.promote(project, "gdn_prefill", "# v2\n", Promoted(code_hash="a2"), "v2", commit=False, earlier=("# v1\n",))
    assert (project / "kernels/gdn_prefill/promoted.py").read_text() == "# v2\n"
    (project / "kernels/gdn_prefill/promoted.py").write_text("# hand edit\n")
    with pytest.raises(gitops.GitError, match="uncommitted edits"):
        gitops.promote(project, "gdn_prefill", "# v3\n", Promoted(), "v3", commit=False, earlier=("# v1\n", "# v2\n"))


@pytest.mark.parametrize("interpreter", [True, False], ids=["cpu", "gpu"])
def test_an_edited_promoted_kernel_stops_a_run_before_it_is_measured_on_every_device(project, op, interpreter):
    from fakes import FakeEvaluator

    from aka.run.setup import prepare_run
    from aka.settings import Budget, OptimizeSettings

    gitops.promote(project, "gdn_prefill", "# v1\n", Promoted(code_hash="a1"), "v1", True)
    (project / "kernels/gdn_prefill/promoted.py").write_text("# hand edit\n")
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=1), interpreter=interpreter)
    ev = FakeEvaluator(op, timing="interpreter" if interpreter else "gpu")
    with pytest.raises(gitops.GitError, match="promoted.py has uncommitted edits"):
        prepare_run(project / "runs", settings, op, ev)
    assert ev.calls == [] and not (project / "runs").exists()  # nothing measured, no run made
