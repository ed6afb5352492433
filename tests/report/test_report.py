"""The run report on runs made by the real loop: the numbers behind each figure, the page's structure."""

from __future__ import annotations

import base64
import math
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from fakes import source
from report_runs import COMPETITORS, run_loop_in

from aka.report.html import write_op_report, write_run_report
from aka.report.tables import geomean_us, load_run_report, promotion_rows

PNG = b"\x89PNG\r\n\x1a\n"


def _g(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def test_trajectory_rows_follow_the_log(gpu_run):
    r = load_run_report(gpu_run)
    assert r.timing == "gpu" and r.shapes == [f"G{i}" for i in range(1, 11)]
    assert r.baseline_geomean == pytest.approx(100)
    rows = {a.n: a for a in r.attempts}
    assert rows[0].geomean_us is None and rows[1].geomean_us is None  # compile / gate failures: never timed
    assert rows[2].geomean_us == pytest.approx(100 / 1.2) and rows[2].verdict == "promoted"
    g4 = _g([100 / 1.5] * 9 + [100 / (1.5 * 0.75)])  # attempt 4: fast, except G4
    assert rows[4].geomean_us == pytest.approx(g4) and rows[4].verdict == "rejected"
    assert [a.best_us for a in r.attempts] == pytest.approx([None, None, 100 / 1.2, 100 / 1.2, g4, g4])
    assert [a.incumbent_us for a in r.attempts] == pytest.approx([100, 100, 100 / 1.2, 100 / 1.2, 100 / 1.2,
                                                                  100 / 1.32])
    assert [a.cum_tokens for a in r.attempts] == [2000 * (n + 1) for n in range(6)] and r.llm_used
    assert r.best_competitor.label == "fla" and r.best_competitor.geomean_us == pytest.approx(COMPETITORS["fla"])


def test_speedup_bars_and_diffs(gpu_run):
    r = load_run_report(gpu_run)
    assert r.final_label == "candidate 5 (promoted)"
    assert [s.shape for s in r.speedups] == r.shapes and all(s.speedup == pytest.approx(1.32) for s in r.speedups)
    assert [(b.label, b.kind) for b in r.bars] == [("baseline", "baseline"), ("candidate 5 (promoted)", "candidate"),
                                                   ("fla", "competitor"), ("slowlib", "competitor")]
    assert [b.geomean_us for b in r.bars] == pytest.approx([100, 100 / 1.32, 80, 150])
    assert [(d.n, d.replaced) for d in r.diffs] == [(2, "baseline"), (5, "candidate 2")]
    assert "-# speed=1.2\n" in r.diffs[1].text and "+# speed=1.32\n" in r.diffs[1].text


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.ids, self.rows, self.tags, self._table = [], set(), 0, [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "img":
            self.imgs.append(a)
        if tag == "table":
            self._table = a.get("id")
        if tag == "tr" and self._table == "attempts":
            self.rows += 1


def _parse(page: Path) -> _Page:
    p = _Page()
    p.feed(page.read_text())
    return p


def test_page_is_self_contained_with_pngs_beside_it(gpu_run, tmp_path):
    page = write_run_report(gpu_run, tmp_path / "rep")
    p = _parse(page)
    assert {"trajectory", "speedup", "implementations", "attempts"} <= p.ids
    assert p.rows == 1 + 6  # header + one row per attempt
    assert len(p.imgs) == 3 and "script" not in p.tags and "link" not in p.tags
    for img, name in zip(p.imgs, ("trajectory", "speedup", "implementations")):
        assert img["src"].startswith("data:image/png;base64,")
        data = base64.b64decode(img["src"].split(",", 1)[1])
        beside = (tmp_path / "rep" / f"{name}.png").read_bytes()
        assert data == beside and data.startswith(PNG) and len(data) > 10_000
    text = page.read_text()
    assert "candidate 5 replacing candidate 2" in text and '<span class="add">+# speed=1.32</span>' in text


def test_text_from_the_run_is_escaped(project, tmp_path):
    evil = "<script>alert(1)</script> & <b>bold</b>"
    run = run_loop_in(project, "gpu", steps=[{"plan": {"hypothesis": evil}, "source": source(1.2)}])
    text = write_run_report(run, tmp_path / "rep").read_text()
    assert "<script>" not in text and "<b>bold" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in text


def test_interpreter_run_renders_without_a_promotion(cpu_run, tmp_path):
    r = load_run_report(cpu_run)
    assert r.interpreter and r.timing_label == "interpreter timings, not representative"
    assert r.diffs == [] and r.best_competitor is None and "no external competitor" in r.notes[0]
    assert r.final_label == "best candidate 0 (not promoted)"  # attempt 1 failed the gate
    page = write_run_report(cpu_run, tmp_path / "rep")
    p = _parse(page)
    assert "no-diff" in p.ids and len(p.imgs) == 3
    assert "interpreter timings never promote" in page.read_text()


def test_captions_and_headings_say_only_what_the_run_has(cpu_run, gpu_run, tmp_path):
    cpu = write_run_report(cpu_run, tmp_path / "cpu").read_text()
    assert "best competitor" not in cpu and "baseline as a line" in cpu  # none was timed on CPU
    assert "final kernel" not in cpu  # the best candidate was not promoted: the kernel in place is the start's
    assert "Per-shape speedup of the best candidate (not promoted)" in cpu and "still the run's starting" in cpu
    gpu = write_run_report(gpu_run, tmp_path / "gpu").read_text()
    assert "baseline and best competitor as lines" in gpu and "Per-shape speedup of the final kernel" in gpu


def test_a_run_where_nothing_was_timed_still_renders(project, tmp_path):
    run = run_loop_in(project, "interpreter", steps=[{"source": source(1.0, gate="fail")}], competitors=False)
    r = load_run_report(run)
    assert [a.geomean_us for a in r.attempts] == [None] and r.speedups == [] and r.final_label == ""
    assert [b.label for b in r.bars] == ["baseline"]
    page = write_run_report(run, tmp_path / "rep")
    assert (tmp_path / "rep" / "trajectory.png").read_bytes().startswith(PNG) and len(_parse(page).imgs) == 3


def test_geomean_needs_every_shape():
    assert geomean_us({"a": 1.0, "b": 4.0}, ["a", "b"]) == pytest.approx(2.0)
    assert geomean_us({"a": 1.0}, ["a", "b"]) is None and geomean_us({}, []) is None


def test_op_history_from_git(gpu_run, project, tmp_path):
    rows, note = promotion_rows(project, "gdn_prefill")
    assert note == "" and [r.attempt for r in rows] == [2, 5]
    assert [r.vs_baseline for r in rows] == pytest.approx([1.2, 1.32]) and rows[0].run_id == gpu_run.name
    page, _, _ = write_op_report(project, "gdn_prefill", tmp_path / "hist")
    p = _parse(page)
    assert {"history", "promotions", "runs"} <= p.ids and (tmp_path / "hist" / "history.png").stat().st_size > 5000


def test_op_history_without_git_says_so(tmp_path):
    from fakes import make_project

    root = make_project(tmp_path, git=False)
    rows, note = promotion_rows(root, "gdn_prefill")
    assert rows == [] and "not a git repository" in note


def _aka(root: Path, *args: str):
    code = "import sys; from aka.cli.main import main; sys.argv = ['aka', *sys.argv[1:]]; main()"
    env = {**os.environ, "AKA_ROOT": str(root)}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env)


def test_cli_report_and_unknown_run(gpu_run, project, tmp_path):
    r = _aka(project, "report", gpu_run.name, "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "index.html").is_file()
    bad = _aka(project, "report", "20990101-000000-abcdef")
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0 and "`aka runs`" in bad.stderr
    both = _aka(project, "report", gpu_run.name, "--op", "gdn_prefill")
    assert both.returncode == 1 and "not both" in both.stderr
    hist = _aka(project, "report", "--op", "gdn_prefill")
    assert hist.returncode == 0 and (project / "runs" / "gdn_prefill" / "_history" / "index.html").is_file()
