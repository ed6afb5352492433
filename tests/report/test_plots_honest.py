"""Issue 40, plots that mislead: read from the matplotlib figure objects (lines, their data, axis
limits), never from pixels.

- the trajectory shows the kernel in place as a step line beside the baseline: a run that starts
  from a promoted kernel 1.24x faster than the baseline has its candidates measured against that,
  not against the baseline line far above them;
- the promotion history breaks its line where promoted.json's baseline_hash changed, with a
  vertical line and a label there;
- the cumulative token axis starts at 0.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from matplotlib.lines import Line2D

from aka.records import Attempt
from aka.report import plots
from aka.report.tables import AttemptRow, PromotionRow, RunReport, attempt_rows


def _row(n, g, inc, verdict="not promoted", tokens=20_000, cum=0):
    return AttemptRow(n=n, verdict=verdict, stage="done", reason="", plan="", geomean_us=g, best_us=g,
                      incumbent_us=inc, vs_baseline=None, tokens=tokens, cum_tokens=cum)


def _report(rows, start_label="promoted", start_us=80.6, llm=True) -> RunReport:
    return RunReport(run_id="r", op="gdn_prefill", device="NVIDIA H200", timing="gpu", status="finished",
                     stop_reason="", shapes=["G1"], baseline_us={"G1": 100.0}, baseline_geomean=100.0,
                     attempts=rows, best_competitor=None, bars=[], final_label="", speedups=[], diffs=[],
                     llm_used=llm, start_label=start_label, start_us=start_us)


def _lines(ax) -> dict[str, Line2D]:
    return {ln.get_label(): ln for ln in ax.get_lines()}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_trajectory_shows_the_kernel_in_place_from_a_promoted_start():
    # started from a promoted kernel at 1.24x the baseline (80.6 us vs 100); no promotion in the run;
    # the candidates are 1.004x the kernel in place: they must sit on its line, not 1.24x below the baseline's
    rows = [_row(0, 80.3, 80.6, cum=70_000), _row(1, 80.9, 80.6, cum=90_000), _row(2, 80.28, 80.6, cum=110_000)]
    fig = plots.trajectory_figure(_report(rows))
    ax = fig.axes[0]
    lines = _lines(ax)
    inc = [ln for label, ln in lines.items() if label.startswith("kernel in place")]
    assert len(inc) == 1, list(lines)
    assert inc[0].get_drawstyle() == "steps-post"
    assert list(inc[0].get_xdata()) == [-0.5, 0, 1, 2, 2.5]
    assert list(inc[0].get_ydata()) == pytest.approx([80.6] * 5)
    base = [ln for label, ln in lines.items() if label.startswith("baseline")]
    assert len(base) == 1 and set(base[0].get_ydata()) == {100.0}  # the baseline line stays, beside it


def test_the_step_changes_at_each_promotion():
    shapes = ["G1"]
    recs = []
    for n, (t, promote) in enumerate([(90.0, False), (70.0, True), (72.0, False), (60.0, True)]):
        verdict = "promoted" if promote else "not promoted"
        recs.append(Attempt.model_validate({
            "n": n, "bench": {"times_us": {"G1": t}}, "decision": {"promote": promote, "verdict": verdict,
                                                                   "reason": ""}}))
    rows = attempt_rows(recs, shapes, 80.0)
    xs, ys = plots.incumbent_steps(_report(rows, start_us=80.0))
    assert xs == [-0.5, 0, 1, 2, 3, 3.5]
    assert ys == pytest.approx([80.0, 80.0, 70.0, 70.0, 60.0, 60.0])
    ln = [x for x in plots.trajectory_figure(_report(rows, start_us=80.0)).axes[0].get_lines()
          if x.get_label().startswith("kernel in place")]
    assert list(ln[0].get_ydata()) == pytest.approx(ys)


def test_a_run_from_the_baseline_without_promotion_draws_no_second_baseline():
    rows = [_row(0, 99.0, 100.2), _row(1, 101.0, 100.2)]
    ax = plots.trajectory_figure(_report(rows, start_label="baseline", start_us=100.2)).axes[0]
    assert not [x for x in _lines(ax) if x.startswith("kernel in place")]


def test_the_token_axis_starts_at_zero():
    rows = [_row(0, 80.3, 80.6, cum=70_000), _row(1, 80.9, 80.6, cum=71_000), _row(2, 80.2, 80.6, cum=72_500)]
    fig = plots.trajectory_figure(_report(rows))
    assert len(fig.axes) == 2
    tok = fig.axes[1]
    assert tok.get_ylabel().startswith("tokens")
    lo, hi = tok.get_ylim()
    assert lo == 0 and hi >= 72_500


def _prom(rev, date, vs_base, h):
    return PromotionRow(rev=rev, date=date, run_id="r", attempt=0, vs_previous=None, vs_baseline=vs_base,
                        device="NVIDIA H200", subject="", baseline_hash=h)


HISTORY = [  # the repo's own: a record without baseline_hash, a removal, then two baselines
    _prom("c759719", "2026-11-29", 1.068, None),
    _prom("071d235", "2026-12-01", None, None),  # promoted.py removed: back on the baseline
    _prom("e399dfa", "2026-12-02", 1.021, "aca52574d689a927"),
    _prom("f63dce8", "2026-12-02", 1.048, "aca52574d689a927"),
    _prom("fd12e43", "2026-12-03", 1.086, "6b1bdf30bf50c835"),
]


def test_promotion_history_breaks_the_line_where_the_baseline_changed():
    segs = plots.baseline_segments(HISTORY)
    assert [[i for i, _ in s] for s in segs] == [[0], [2, 3], [4]]
    ax = plots.history_figure("gdn_prefill", HISTORY).axes[0]
    kernel = [ln for ln in ax.get_lines() if ln.get_color() == plots.COLORS["promoted"]]
    assert [list(ln.get_xdata()) for ln in kernel] == [[0], [2, 3], [4]]  # no line joins 1.068 to 1.021
    assert [list(ln.get_ydata()) for ln in kernel] == [[1.068], [1.021, 1.048], [1.086]]
    vlines = [ln for ln in ax.get_lines() if len(set(ln.get_xdata())) == 1 and ln.get_linestyle() == ":"]
    assert sorted(ln.get_xdata()[0] for ln in vlines) == [1.0, 3.5]  # between the promotions either side
    texts = [t.get_text() for t in ax.texts]
    assert sum("baseline changed" in t for t in texts) == 2 and any("aca5257" in t for t in texts)
    assert "baseline changed" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_one_baseline_is_one_line():
    rows = [_prom("a", "2026-12-02", 1.02, "h"), _prom("b", "2026-12-02", 1.05, "h")]
    ax = plots.history_figure("op", rows).axes[0]
    kernel = [ln for ln in ax.get_lines() if ln.get_color() == plots.COLORS["promoted"]]
    assert len(kernel) == 1 and list(kernel[0].get_xdata()) == [0, 1]
    assert not ax.texts


def test_png_wrappers_still_return_png():
    assert plots.history("op", HISTORY).startswith(b"\x89PNG")
    assert plots.trajectory(_report([_row(0, 80.3, 80.6)])).startswith(b"\x89PNG")
