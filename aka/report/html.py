"""The report as one self-contained HTML page (PNGs inlined as data URIs) plus the PNGs beside it.

Every piece of text from a run (plans, reasons, diffs, shape ids) goes through html.escape: a
candidate's source or an LLM's hypothesis is data, never markup.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from aka.report import plots as report_plots
from aka.report.tables import PromotionRow, RunReport, load_run_report, promotion_rows

CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px;width:100%}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;
vertical-align:top}th{background:#f4f4f4}.num{text-align:right;font-variant-numeric:tabular-nums}
.promoted{color:#2e7d32;font-weight:600}.rejected{color:#b71c1c}.not-promoted{color:#a66b00}
figure{margin:12px 0}figcaption{font-size:12px;color:#555}img{max-width:100%}
pre.diff{background:#fafafa;border:1px solid #ddd;padding:8px;overflow-x:auto;font-size:12px}
.add{color:#1b5e20;background:#e8f5e9}.del{color:#b71c1c;background:#ffebee}.hunk{color:#6a1b9a}
.note{background:#fff8e1;border-left:4px solid #f9a825;padding:6px 10px;margin:8px 0}"""

e = html.escape


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}×"


def _us(v: float | None) -> str:
    return "–" if v is None else f"{v:,.1f}"


def _figure(out: Path, name: str, png: bytes, caption: str) -> str:
    (out / name).write_bytes(png)
    data = base64.b64encode(png).decode()
    return (f'<figure id="{e(name[:-4])}"><img alt="{e(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{e(caption)} ({e(name)})</figcaption></figure>")


def _page(title: str, body: list[str]) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _diff_html(text: str) -> str:
    lines = []
    for line in text.splitlines():
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
               else "del" if line.startswith("-") and not line.startswith("---") else "")
        lines.append(f'<span class="{cls}">{e(line)}</span>' if cls else e(line))
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def _attempts_table(r: RunReport) -> str:
    head = "<tr><th>#</th><th>outcome</th><th>stopped at</th><th>geomean µs</th><th>vs baseline</th>"
    head += "<th>tokens</th>" if r.llm_used else ""
    head += "<th>plan</th><th>reason</th></tr>"
    rows = []
    for a in r.attempts:
        tok = f'<td class="num">{a.tokens}</td>' if r.llm_used else ""
        rows.append(f'<tr><td class="num">{a.n}</td><td class="{e(a.verdict.replace(" ", "-"))}">{e(a.verdict)}</td>'
                    f'<td>{e(a.stage)}</td><td class="num">{_us(a.geomean_us)}</td>'
                    f'<td class="num">{_x(a.vs_baseline)}</td>{tok}<td>{e(a.plan)}</td><td>{e(a.reason)}</td></tr>')
    if not rows:
        rows.append('<tr><td colspan="8">no attempts yet</td></tr>')
    return f'<table id="attempts">{head}{"".join(rows)}</table>'


def write_run_report(run_dir: Path, out: Path) -> Path:
    """Write index.html and the PNGs for one run into `out`; returns the page's path."""
    r = load_run_report(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    body = [f"<h1>{e(r.op)} — run {e(r.run_id)}</h1>",
            f"<p>device <b>{e(r.device)}</b>; {e(r.timing_label)}; status {e(r.status)}"
            + (f"; stopped: {e(r.stop_reason)}" if r.stop_reason else "")
            + f"; {len(r.attempts)} attempts; bench shapes {e(', '.join(r.shapes))}</p>"]
    if r.interpreter:
        body.append('<p class="note">Timings come from the Triton CPU interpreter: they show the report\'s '
                    "shape, not kernel speed, and nothing measured this way can be promoted.</p>")
    body += [f'<p class="note">{e(n)}</p>' for n in r.notes]
    body.append("<h2>Search trajectory</h2>")
    inc_line = bool(report_plots.incumbent_steps(r)[0]) and (
        r.start_label != "baseline" or any(a.verdict == "promoted" for a in r.attempts))
    lines = "baseline and best competitor as lines" if r.best_competitor else "baseline as a line"
    body.append(_figure(out, "trajectory.png", report_plots.trajectory(r),
                        f"best geomean latency against attempt number, {lines}"
                        + (", the kernel in place as a step line (it changes at promotions)" if inc_line else "")
                        + (", cumulative tokens on the right axis (from 0)" if r.llm_used else "")))
    # the final kernel is the one in place when the run ended: a candidate only if it was promoted
    body.append("<h2>Per-shape speedup of the final kernel</h2>" if r.diffs else
                "<h2>Per-shape speedup of the best candidate (not promoted)</h2>")
    body.append(_figure(out, "speedup.png", report_plots.speedup(r),
                        f"{r.final_label or 'no timed candidate'}: baseline time / kernel time per shape; "
                        "above 1.0 is faster than the baseline"))
    if not r.diffs:
        body.append(f'<p class="note">Nothing was promoted: the kernel in place is still the run\'s starting '
                    f"kernel ({e(r.start_label)}).</p>")
    body.append("<h2>Geomean latency per implementation</h2>")
    body.append(_figure(out, "implementations.png", report_plots.implementations(r),
                        "geomean latency over the bench shapes, lower is better"))
    body.append("<h2>Attempts</h2>")
    body.append(_attempts_table(r))
    body.append("<h2>Promoted kernel against the incumbent it replaced</h2>")
    if not r.diffs:
        why = " (interpreter timings never promote)" if r.interpreter else ""
        body.append(f'<p class="note" id="no-diff">This run promoted no kernel{e(why)}: there is no diff.</p>')
    for d in r.diffs:
        body.append(f"<h3>candidate {d.n} replacing {e(d.replaced)}</h3>{_diff_html(d.text)}")
    page = out / "index.html"
    page.write_text(_page(f"aka report {r.op} {r.run_id}", body))
    return page


def _history_table(rows: list[PromotionRow]) -> str:
    head = ("<tr><th>commit</th><th>date</th><th>run</th><th>attempt</th><th>vs previous</th><th>vs baseline</th>"
            "<th>device</th><th>subject</th></tr>")
    body = "".join(
        f"<tr><td>{e(p.rev[:10])}</td><td>{e(p.date[:19])}</td><td>{e(p.run_id)}</td><td>{e(str(p.attempt))}</td>"
        f'<td class="num">{_x(p.vs_previous)}</td><td class="num">{_x(p.vs_baseline)}</td><td>{e(p.device)}</td>'
        f"<td>{e(p.subject)}</td></tr>" for p in rows)
    return f'<table id="promotions">{head}{body}</table>'


def _runs_table(runs: list[dict]) -> str:
    head = "<tr><th>run</th><th>started</th><th>status</th><th>attempts</th><th>promoted</th><th>device</th></tr>"
    body = "".join(f"<tr><td>{e(x['run_id'])}</td><td>{e(str(x['started']))}</td><td>{e(str(x['status']))}</td>"
                   f'<td class="num">{x["attempts"]}</td><td class="num">{x["promoted"]}</td>'
                   f"<td>{e(str(x['device']))}</td></tr>" for x in runs)
    return f'<table id="runs">{head}{body or "<tr><td colspan=6>no runs</td></tr>"}</table>'


def write_op_report(root: Path, op: str, out: Path) -> tuple[Path, list[PromotionRow], str]:
    """The op's promotion history (git) and its runs, as one page; returns (page, rows, note)."""
    from aka.run.store import list_runs

    rows, note = promotion_rows(root, op)
    runs = list_runs(root / "runs", op)
    out.mkdir(parents=True, exist_ok=True)
    body = [f"<h1>{e(op)} — promotion history</h1>"]
    if note:
        body.append(f'<p class="note">{e(note)}</p>')
    body.append(_figure(out, "history.png", report_plots.history(op, rows),
                        "geomean speedup over the baseline of each promoted kernel, oldest first"))
    body += ["<h2>Promotions</h2>", _history_table(rows), "<h2>Runs</h2>", _runs_table(runs)]
    page = out / "index.html"
    page.write_text(_page(f"aka report {op} history", body))
    return page, rows, note
