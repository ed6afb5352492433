"""Card stats and lessons over a synthetic attempts.jsonl in the loop's record format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aka.cli.main import app
from aka.knowledge.lessons import distill, lessons_from_attempts, load_lessons, read_attempts, write_lessons
from aka.knowledge.wiki_stats import card_stats, ordered, run_logs
from aka.records import Attempt
from aka.wiki import parse_page


def _rec(n, cited, change, promote=False, failed_stage="", gate_ok=True, reason="", **extra):
    rec = {
        "n": n, "failed_stage": failed_stage, "score": 1.1 + n / 10 if not failed_stage else None,
        "plan": {"hypothesis": "h", "structural_change": change, "cited_wiki": cited, "pattern": None},
        "decision": {"promote": promote, "verdict": "promoted" if promote else "rejected", "reason": reason},
        "measurements": {"geomean": 1.2 if promote else None, "noise": 0.01},
        "some_future_field": {"x": 1},
    }
    if failed_stage not in ("check", "compile"):
        rec["gate"] = {"sets": ["smoke"], "passed": {"S1": [gate_ok, True]}, "error": "" if gate_ok else "S1 off"}
    if not failed_stage:
        rec["bench"] = {"times_us": {"S1": 10.0}, "timing": "gpu", "error": "", "vs_incumbent": 1.2}
    rec.update(extra)
    return rec


RECORDS = [
    _rec(0, ["split-kv-decode", "gqa-head-packing"], "split KV into 8 segments", promote=True,
         reason="geomean 1.20x over incumbent"),
    _rec(1, ["split-kv-decode"], "split KV into 32 segments", reason="no gain: 0.98x"),
    _rec(2, ["gqa-head-packing"], "pack heads, BLOCK_N 256", failed_stage="gate", gate_ok=False,
         reason="gate failed (S1 round 1)"),
    _rec(3, [], "num_stages 4 with BLOCK_N 128", promote=True, reason="geomean 1.05x"),
    _rec(4, ["no-such-card"], "unroll everything", failed_stage="compile", reason="compile failed: out of resources"),
]

ATTEMPTS = [Attempt.model_validate(r) for r in RECORDS]  # as aka.records reads them back


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "runs" / "fa4_decode" / "r1"
    d.mkdir(parents=True)
    text = "".join(json.dumps(r) + "\n" for r in RECORDS) + '{"n": 5, "pla'  # torn last line: a killed run
    (d / "attempts.jsonl").write_text(text)
    return d


def test_card_stats(run_dir):
    stats = card_stats(run_logs(run_dir.parent.parent))
    s = stats["split-kv-decode"]
    assert (s.cited, s.passed_gate, s.promoted, s.runs) == (2, 2, 1, {"fa4_decode/r1"})
    g = stats["gqa-head-packing"]
    assert (g.cited, g.passed_gate, g.promoted) == (2, 1, 1)
    assert stats["no-such-card"].passed_gate == 0
    assert [x.card_id for x in ordered(stats)][:2] == ["gqa-head-packing", "split-kv-decode"]  # tie: payoff, then id


def test_torn_last_line_is_skipped_but_bad_middle_line_fails(run_dir):
    assert len(read_attempts(run_dir / "attempts.jsonl")) == 5
    (run_dir / "attempts.jsonl").write_text('{"n": 0}\nnot json\n{"n": 1}\n')
    from aka.knowledge.lessons import LessonError

    with pytest.raises(LessonError, match="line 2 is not JSON"):
        read_attempts(run_dir / "attempts.jsonl")


def test_lessons_from_attempts():
    lessons = lessons_from_attempts(ATTEMPTS)
    assert [les.kind for les in lessons] == ["worked", "failed", "failed", "worked", "failed"]
    first = lessons[0]
    assert first.what == "split KV into 8 segments" and first.cited_wiki == ["split-kv-decode", "gqa-head-packing"]
    assert first.measurements["geomean"] == 1.2 and first.measurements["bench.vs_incumbent"] == 1.2
    assert lessons[2].why.startswith("gate failed") and lessons[4].why.startswith("compile")


def test_write_and_load_lessons(run_dir):
    written = write_lessons(run_dir)
    assert (run_dir / "lessons.jsonl").is_file()
    assert load_lessons(run_dir) == written


def test_distill_proposes_drafts_that_validate(run_dir, tmp_path):
    drafts = distill(lessons_from_attempts(ATTEMPTS), "fa4_decode/r1", {"split-kv-decode", "gqa-head-packing"})
    updates = {d.card_id for d in drafts if d.action == "update"}
    assert updates == {"split-kv-decode", "gqa-head-packing"}  # no-such-card gets no draft
    new = [d for d in drafts if d.action == "new"]
    assert len(new) == 1 and new[0].relpath.startswith("techniques/")
    path = tmp_path / "techniques" / f"{new[0].card_id}.md"
    path.parent.mkdir()
    path.write_text(new[0].text)
    card = parse_page(path)
    assert card.meta.sources == ["fa4_decode/r1 attempt 3 (aka run log)"]
    split = next(d for d in drafts if d.card_id == "split-kv-decode")
    assert "attempt 0: worked" in split.text and "attempt 1: failed" in split.text


def test_cli_distill_writes_only_where_asked(run_dir, tmp_path):
    out = tmp_path / "drafts"
    res = CliRunner().invoke(app, ["wiki", "distill", str(run_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir())[0].endswith(".md")
    from aka.contract.ops import project_root

    res = CliRunner().invoke(app, ["wiki", "distill", str(run_dir), "--out", str(project_root() / "wiki" / "x")])
    assert res.exit_code != 0 and not (project_root() / "wiki" / "x").exists()


def test_cli_stats(run_dir):
    res = CliRunner().invoke(app, ["wiki", "stats", "--runs", str(run_dir.parent.parent)])
    assert res.exit_code == 0, res.output
    assert "split-kv-decode" in res.output and "not in wiki" in res.output
