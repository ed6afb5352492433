"""The report's figures, drawn with matplotlib's Agg backend into PNG bytes (no display needed).

Each function draws exactly the rows aka.report.tables computed; titles say which timings they show, and
interpreter timings are labelled as not representative in every title that carries a number.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # before pyplot: CI and device machines have no display

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from aka.report.tables import PromotionRow, RunReport  # noqa: E402

COLORS = {"promoted": "#2e7d32", "rejected": "#9e9e9e", "not promoted": "#f9a825", "baseline": "#1565c0",
          "competitor": "#c62828", "incumbent": "#6a1b9a", "candidate": "#2e7d32", "tokens": "#8d6e63"}


def _unit(values: list[float]) -> tuple[float, str]:
    """Scale µs values to a readable unit (interpreter runs take seconds per call)."""
    top = max(values, default=1.0)
    return (1.0, "µs") if top < 1e4 else (1e3, "ms") if top < 1e7 else (1e6, "s")


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#555")
    ax.set_xticks([])
    ax.set_yticks([])


def trajectory(r: RunReport) -> bytes:
    return _png(trajectory_figure(r))


def trajectory_figure(r: RunReport) -> Figure:
    """Best geomean latency against attempt number; baseline, the kernel in place (a step line that
    changes at promotions) and best competitor as lines; cumulative tokens on an axis from 0.

    Without the kernel in place a run that started from a promoted kernel misleads: a candidate
    1.004x faster than it sits far below the baseline line and reads as a large gain."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    pts = [a for a in r.attempts if a.geomean_us is not None]
    vals = [a.geomean_us for a in pts] + [r.baseline_geomean or 0.0]
    if r.best_competitor:
        vals.append(r.best_competitor.geomean_us)
    scale, unit = _unit(vals)
    ns = [a.n for a in r.attempts]
    if r.baseline_geomean:
        ax.axhline(r.baseline_geomean / scale, color=COLORS["baseline"], ls="--", lw=1.2,
                   label=f"baseline {r.baseline_geomean / scale:.4g} {unit}")
    if r.best_competitor:
        c = r.best_competitor
        ax.axhline(c.geomean_us / scale, color=COLORS["competitor"], ls=":", lw=1.5,
                   label=f"best competitor ({c.label}) {c.geomean_us / scale:.4g} {unit}")
    for verdict in ("rejected", "not promoted", "promoted"):
        sel = [a for a in pts if a.verdict == verdict]
        if sel:
            ax.scatter([a.n for a in sel], [a.geomean_us / scale for a in sel], s=40 if verdict == "promoted" else 18,
                       color=COLORS[verdict], marker="*" if verdict == "promoted" else "o", zorder=3,
                       label=f"attempt ({verdict})")
    best = [(a.n, a.best_us) for a in r.attempts if a.best_us is not None]
    if best:
        ax.step([n for n, _ in best], [b / scale for _, b in best], where="post", color="black", lw=1.6,
                label="best timed so far")
    xs, ys = incumbent_steps(r)
    if xs and (r.start_label != "baseline" or any(a.verdict == "promoted" for a in r.attempts)):
        # (a run from the baseline that promoted nothing: the baseline line already is the kernel in place)
        ax.step(xs, [v / scale for v in ys], where="post", color=COLORS["incumbent"], lw=1.6, ls="-.",
                label=f"kernel in place (from {r.start_label}; changes at promotions)", zorder=2)
    untimed = [a.n for a in r.attempts if a.geomean_us is None]
    if untimed:  # a rug on the x axis: attempts that stopped before the bench still count on the axis
        ax.scatter(untimed, [0.02] * len(untimed), transform=ax.get_xaxis_transform(), marker="x", s=22,
                   color=COLORS["competitor"], label="attempt not timed (failed earlier)", clip_on=False)
    if not pts:
        ax.text(0.5, 0.8, f"no attempt was timed on every shape ({len(r.attempts)} attempts)", ha="center",
                va="center", transform=ax.transAxes, color="#555", bbox={"fc": "white", "ec": "#ccc"})
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("attempt")
    ax.set_ylabel(f"geomean latency over {len(r.shapes)} shapes ({unit})")
    if ns:
        ax.set_xlim(min(ns) - 0.5, max(ns) + 0.5)
    if r.llm_used:
        ax2 = ax.twinx()
        cum = [a.cum_tokens for a in r.attempts]
        ax2.plot(ns, cum, color=COLORS["tokens"], lw=1, alpha=0.8, label="tokens (cumulative)")
        ax2.set_ylabel("tokens (cumulative)", color=COLORS["tokens"])
        ax2.set_ylim(0, max(max(cum, default=0) * 1.05, 1))  # a count: from 0, not from the first value
        h2, l2 = ax2.get_legend_handles_labels()
    else:
        h2, l2 = [], []
    h1, l1 = ax.get_legend_handles_labels()
    # Below the axes: inside, the legend hid points and the token line.
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    ax.set_title(f"{r.op}: search trajectory ({r.timing_label})", fontsize=11)
    ax.grid(alpha=0.3)
    return fig


def incumbent_steps(r: RunReport) -> tuple[list[float], list[float]]:
    """The kernel in place as a post-step line: the run's starting kernel from half an attempt before
    the first one, then after each attempt's decision (it changes at promotions), to half an attempt
    after the last. Empty when no geomean of it is known."""
    xs: list[float] = []
    ys: list[float] = []
    if r.attempts and r.start_us is not None:
        xs, ys = [r.attempts[0].n - 0.5], [r.start_us]
    for a in r.attempts:
        if a.incumbent_us is not None:
            xs.append(a.n)
            ys.append(a.incumbent_us)
    if xs:
        xs.append(r.attempts[-1].n + 0.5)
        ys.append(ys[-1])
    return xs, ys


def speedup(r: RunReport) -> bytes:
    """Per-shape speedup of the final kernel over the baseline; 1.0 is the baseline."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    if not r.speedups:
        _empty(ax, "no candidate was timed on every shape: no speedup to show")
    else:
        xs = list(range(len(r.speedups)))
        ys = [s.speedup for s in r.speedups]
        ax.axhline(1.0, color=COLORS["baseline"], ls="--", lw=1.2, label="baseline (1.0)")
        ax.scatter(xs, ys, c=[COLORS["promoted"] if y >= 1 else COLORS["competitor"] for y in ys], s=40, zorder=3)
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        ax.set_xticks(xs, [s.shape for s in r.speedups], rotation=45 if len(xs) > 8 else 0, fontsize=8)
        lo, hi = min(ys + [1.0]), max(ys + [1.0])
        ax.set_ylim(lo - 0.1 * (hi - lo + 0.1), hi + 0.15 * (hi - lo + 0.1))
        ax.set_ylabel("speedup over baseline (×)")
        ax.set_xlabel("shape")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    ax.set_title(f"{r.op}: {r.final_label or 'final kernel'} vs baseline per shape ({r.timing_label})", fontsize=11)
    return _png(fig)


def implementations(r: RunReport) -> bytes:
    """Geomean latency per implementation, as horizontal bars."""
    fig, ax = plt.subplots(figsize=(8, 0.6 * max(len(r.bars), 2) + 1.2))
    if not r.bars:
        _empty(ax, "no implementation was timed on every shape")
    else:
        scale, unit = _unit([b.geomean_us for b in r.bars])
        ys = list(range(len(r.bars)))[::-1]
        vals = [b.geomean_us / scale for b in r.bars]
        ax.barh(ys, vals, color=[COLORS[b.kind] for b in r.bars])
        ax.set_yticks(ys, [b.label for b in r.bars], fontsize=9)
        for y, v in zip(ys, vals):
            ax.text(v, y, f" {v:.4g} {unit}", va="center", fontsize=8)
        ax.set_xlim(0, max(vals) * 1.25)
        ax.set_xlabel(f"geomean latency over {len(r.shapes)} shapes ({unit}; lower is better)")
        ax.grid(alpha=0.3, axis="x")
    ax.set_title(f"{r.op}: geomean latency per implementation ({r.timing_label})", fontsize=11)
    return _png(fig)


def history(op: str, rows: list[PromotionRow]) -> bytes:
    return _png(history_figure(op, rows))


def baseline_segments(rows: list[PromotionRow]) -> list[list[tuple[int, PromotionRow]]]:
    """The promotions with a recorded speedup, (index in rows, row), cut into runs of one baseline.

    A "vs baseline" figure is measured against the baseline of its time: where promoted.json's
    baseline_hash changes between consecutive promotions (a record without one predates the field:
    its baseline is unknown, so it differs from a recorded one) the figures are not comparable and
    a line across the change would read as a regression or a gain that no kernel made."""
    segs: list[list[tuple[int, PromotionRow]]] = []
    for i, p in enumerate(rows):
        if not p.vs_baseline:
            continue
        if not segs or segs[-1][-1][1].baseline_hash != p.baseline_hash:
            segs.append([])
        segs[-1].append((i, p))
    return segs


def history_figure(op: str, rows: list[PromotionRow]) -> Figure:
    """Geomean speedup over the baseline of each promoted kernel, oldest first; one line per baseline,
    a vertical line where the baseline changed."""
    fig, ax = plt.subplots(figsize=(8, 3.8))
    segs = baseline_segments(rows)
    if not segs:
        _empty(ax, f"{op}: no promotion with a recorded speedup")
    else:
        pts = [pt for seg in segs for pt in seg]
        ax.axhline(1.0, color=COLORS["baseline"], ls="--", lw=1.2, label="baseline (1.0)")
        for k, seg in enumerate(segs):
            ax.plot([i for i, _ in seg], [p.vs_baseline for _, p in seg], marker="o", color=COLORS["promoted"],
                    label="promoted kernel" if k == 0 else "_nolegend_")
            if k:
                x = (segs[k - 1][-1][0] + seg[0][0]) / 2
                h = seg[0][1].baseline_hash
                ax.axvline(x, color=COLORS["competitor"], ls=":", lw=1.2,
                           label="baseline changed" if k == 1 else "_nolegend_")
                ax.text(x, 0.98, f" baseline changed ({h[:7] if h else 'not recorded'})", rotation=90,
                        transform=ax.get_xaxis_transform(), ha="right", va="top", fontsize=7,
                        color=COLORS["competitor"])
        ax.set_xticks([i for i, _ in pts], [f"{p.rev[:7]}\n{p.date[:10]}" for _, p in pts], fontsize=7)
        ax.set_ylabel("geomean speedup over the baseline of its time (×)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    ax.set_title(f"{op}: promotion history (GPU timings recorded at promotion)", fontsize=11)
    return fig
