"""A promotion that only changed CONFIG values is kept as those values over baseline.py (issue 38):
no copy of the baseline's code, the same kernel byte for byte when rendered, and a baseline whose code
changes afterwards is named as such by the set-up and `aka regress`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aka.contract.module_config import config_of, render
from aka.contract.ops import get_op
from aka.evaluate.parent.outcomes import code_hash
from aka.records import Promoted
from aka.report.regress import still_wins
from aka.run import gitops

REPO = Path(__file__).resolve().parents[2]
BASE = '''"""A kernel with knobs."""

CONFIG = {
    "BLOCK": 64,  # rows per program
    "warps": 4,
}


def gdn_prefill(**kw):
    return CONFIG["BLOCK"]
'''
KDIR = "kernels/gdn_prefill"


def git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def knobs(project):
    (project / KDIR / "baseline.py").write_text(BASE)
    git(project, "commit", "-qam", "a baseline with CONFIG")
    return project


def test_config_only_promotion_is_stored_as_values_and_renders_byte_identical(knobs):
    source = render(BASE, {"BLOCK": 128, "warps": 4})
    rev = gitops.promote(knobs, "gdn_prefill", source, Promoted(code_hash=code_hash(source)), "v1", True)
    assert git(knobs, "show", "--name-only", "--format=", rev).split() == [f"{KDIR}/promoted.json"]
    assert not (knobs / KDIR / "promoted.py").exists()
    meta = gitops.read_promoted_meta(knobs, "gdn_prefill")
    assert meta.over_baseline.changes == {"BLOCK": 128}
    path = get_op("gdn_prefill", knobs).default_kernel()
    assert path == knobs / KDIR / ".rendered" / "promoted.py"
    assert path.read_text() == source and code_hash(path.read_text()) == meta.code_hash
    assert git(knobs, "status", "--porcelain") == ""  # the rendered module is ignored by git
    assert gitops.config_promotion_drift(knobs, "gdn_prefill") is None


def test_a_code_change_keeps_a_module_and_a_later_config_promotion_removes_it(knobs):
    changed = BASE.replace("return CONFIG", "return 2 * CONFIG")
    gitops.promote(knobs, "gdn_prefill", changed, Promoted(code_hash="c1"), "code", True)
    assert (knobs / KDIR / "promoted.py").read_text() == changed
    assert gitops.read_promoted_meta(knobs, "gdn_prefill").over_baseline is None
    source = render(BASE, {"BLOCK": 32, "warps": 8})
    rev = gitops.promote(knobs, "gdn_prefill", source, Promoted(code_hash="c2"), "values", True)
    assert sorted(git(knobs, "show", "--name-status", "--format=", rev).splitlines()) == [
        f"D\t{KDIR}/promoted.py", f"M\t{KDIR}/promoted.json"]
    assert get_op("gdn_prefill", knobs).default_kernel().read_text() == source
    # history sees both promotions; rolling back restores the module, then the baseline
    assert [h.meta.code_hash for h in gitops.history(knobs, "gdn_prefill")] == ["c2", "c1"]
    gitops.rollback(knobs, "gdn_prefill")
    assert (knobs / KDIR / "promoted.py").read_text() == changed
    gitops.rollback(knobs, "gdn_prefill", to=gitops.history(knobs, "gdn_prefill")[1].rev)
    assert get_op("gdn_prefill", knobs).default_kernel().read_text() == source
    assert git(knobs, "status", "--porcelain") == ""


def test_rolling_back_past_a_config_promotion_returns_to_the_baseline(knobs):
    source = render(BASE, {"BLOCK": 128, "warps": 4})
    gitops.promote(knobs, "gdn_prefill", source, Promoted(code_hash="v"), "v1", True)
    gitops.rollback(knobs, "gdn_prefill")
    assert not (knobs / KDIR / "promoted.json").exists()
    assert get_op("gdn_prefill", knobs).default_kernel() == knobs / KDIR / "baseline.py"


def test_a_reformatted_config_is_not_taken_for_values_only(knobs):
    """Rendered back it would not be the promoted bytes (its code hash, which the knowledge keys on,
    would change): kept as a module."""
    source = BASE.replace('"BLOCK": 64,', '"BLOCK": 128,')  # same code, CONFIG written by hand
    assert gitops.as_config_promotion(BASE, source) is None
    gitops.promote(knobs, "gdn_prefill", source, Promoted(), "hand", True)
    assert (knobs / KDIR / "promoted.py").read_text() == source


def test_no_commit_may_replace_its_own_config_promotion_but_not_an_edit(knobs):
    v1, v2 = render(BASE, {"BLOCK": 128, "warps": 4}), render(BASE, {"BLOCK": 256, "warps": 4})
    gitops.promote(knobs, "gdn_prefill", v1, Promoted(), "v1", commit=False)
    gitops.promote(knobs, "gdn_prefill", v2, Promoted(), "v2", commit=False, earlier=(v1,))
    assert get_op("gdn_prefill", knobs).default_kernel().read_text() == v2
    (knobs / KDIR / "promoted.json").write_text('{"over_baseline": {"baseline_code": "x", "changes": {"BLOCK": 8}}}')
    with pytest.raises(gitops.GitError, match="uncommitted edits.*promoted.json"):
        gitops.promote(knobs, "gdn_prefill", v1, Promoted(), "v3", commit=False, earlier=(v1, v2))


def test_a_changed_baseline_gets_the_values_and_is_named(knobs):
    gitops.promote(knobs, "gdn_prefill", render(BASE, {"BLOCK": 128, "warps": 8}), Promoted(), "v1", True)
    new_base = BASE.replace('    "warps": 4,\n', "").replace("return CONFIG", "return 3 * CONFIG")
    (knobs / KDIR / "baseline.py").write_text(new_base)
    drift = gitops.config_promotion_drift(knobs, "gdn_prefill")
    assert "baseline.py's code changed since the promotion" in drift
    assert "no longer has warps (left out)" in drift and "(BLOCK=128)" in drift
    rendered = get_op("gdn_prefill", knobs).default_kernel().read_text()
    assert config_of(rendered) == {"BLOCK": 128} and "return 3 * CONFIG" in rendered


def test_a_baseline_without_config_cannot_take_the_values(knobs):
    from aka.errors import ContractError

    gitops.promote(knobs, "gdn_prefill", render(BASE, {"BLOCK": 128, "warps": 4}), Promoted(), "v1", True)
    (knobs / KDIR / "baseline.py").write_text("def gdn_prefill(**kw):\n    return 1\n")
    with pytest.raises(ContractError, match="no literal CONFIG dict.*aka rollback"):
        get_op("gdn_prefill", knobs).default_kernel()


def test_regress_says_whether_the_values_still_win():
    assert "1.100x the baseline (geomean of 2 shapes): they still win" in still_wins(
        {"G1": 100.0, "G2": 200.0}, {"G1": 110.0, "G2": 220.0})
    assert "they no longer win" in still_wins({"G1": 100.0}, {"G1": 90.0})
    assert "unknown" in still_wins({"G1": 100.0}, {})


@pytest.mark.parametrize("op_name", ["gdn_prefill", "fa4_decode", "fa4_prefill"])
def test_a_shipped_promotion_kept_as_values_renders_to_its_recorded_hash(op_name):
    """A promotion shipped as CONFIG values over baseline.py renders to the code hash promoted.json records
    (the kernel its figures were measured on), with no drift; a code change to baseline.py must come
    with the promotion re-measured or retired. (gdn_prefill's of 2026-12-02/03, blk16 and a -14 warm-up,
    was retired on 2026-12-05: -14 is baseline.py's default, the tc64 prep replaced blk16.)"""
    meta = gitops.read_promoted_meta(REPO, op_name)
    if meta is None or meta.over_baseline is None:
        assert gitops.config_promotion_drift(REPO, op_name) is None
        return
    kdir = REPO / "kernels" / op_name
    assert not (kdir / "promoted.py").exists()
    base = (kdir / "baseline.py").read_text()
    source = render(base, {**config_of(base), **meta.over_baseline.changes})
    assert code_hash(source) == meta.code_hash
    assert gitops.config_promotion_drift(REPO, op_name) is None


class ConfigMeasurer:
    """`aka regress`'s measurer on a GPU whose kernels run 100 µs x 64 / CONFIG['BLOCK']."""

    def device(self):
        return {"name": "fake H200", "interpreter": False}

    def gate(self, op, kernel, sets):
        return {c.id: True for s in sets for c in op.cases(s)}, {}, ""

    def bench(self, op, kernels, shapes):
        return {name: {c.id: 100.0 * 64 / config_of(Path(p).read_text())["BLOCK"] for c in op.cases(shapes)}
                for name, p in kernels.items()}, ""


@pytest.mark.parametrize("block,verdict", [(64, "2.000x the baseline (geomean of 10 shapes): they still win"),
                                           (256, "0.500x the baseline (geomean of 10 shapes): they no longer win")])
def test_regress_times_the_values_on_the_changed_baseline(knobs, block, verdict):
    from aka.report.regress import run_regress

    gitops.promote(knobs, "gdn_prefill", render(BASE, {"BLOCK": 128, "warps": 4}), Promoted(), "v1", True)
    new_base = BASE.replace("return CONFIG", "return 3 * CONFIG").replace('"BLOCK": 64', f'"BLOCK": {block}')
    (knobs / KDIR / "baseline.py").write_text(new_base)
    out, _ = run_regress([get_op("gdn_prefill", knobs)], ConfigMeasurer(), 0.05, record=False)
    summary = out.summary()
    assert "promoted.json: baseline.py's code changed since the promotion" in summary
    assert verdict in summary


def test_the_set_up_names_the_changed_baseline_and_times_the_values_on_it(knobs):
    from fakes import FakeEvaluator

    from aka.run.setup import prepare_run
    from aka.settings import Budget, OptimizeSettings

    gitops.promote(knobs, "gdn_prefill", render(BASE, {"BLOCK": 128, "warps": 4}), Promoted(), "v1", True)
    (knobs / KDIR / "baseline.py").write_text(BASE.replace("return CONFIG", "return 3 * CONFIG"))
    op = get_op("gdn_prefill", knobs)
    lines: list[str] = []
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=1), commit=False)
    store = prepare_run(knobs / "runs", settings, op, FakeEvaluator(op), say=lines.append)
    assert any(ln.startswith("promoted.json: baseline.py's code changed") for ln in lines)
    incumbent = store.read_run().incumbent
    assert incumbent.label == "promoted" and "return 3 * CONFIG" in Path(incumbent.path).read_text()
