"""What the loop lends a model's tools for one attempt (aka.agent.llm.tools.Workbench), over the Evaluator.

Every measurement goes through the same Evaluator door the loop uses (policy check, compile, the
gate, the ABBA comparison, the profiler), on a draft file runs/<op>/<run>/candidates/<n>.tool.py:
no second gate, and nothing a tool reports can promote a candidate. Timings and profiles need a
GPU; in the interpreter those tools answer with an error saying so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aka.contract.shapes import every_case
from aka.evaluate.parent.evaluator import Evaluator
from aka.evaluate.static.compstats import CompileStats, format_table
from aka.evaluate.wire import CapturedLaunch
from aka.settings import OptimizeSettings

NEEDS_GPU = ("{what} needs a GPU: this run uses Triton's CPU interpreter, whose timings mean nothing; "
             "use compile() and check(), then submit(note)")


class ToolBench:
    def __init__(self, ev: Evaluator, op, settings: OptimizeSettings, draft: Path, incumbent: Path, seed: int):
        self.ev, self.op, self.settings = ev, op, settings
        self.draft, self.incumbent, self.seed = draft, incumbent, seed
        self.calls = 0

    def _write(self, source: str) -> Path:
        self.draft.write_text(source)
        self.calls += 1
        return self.draft

    def compile(self, source: str) -> tuple[bool, str]:
        chk = self.ev.check(source)
        if not chk.ok:
            return False, f"policy check failed: {chk.error}"
        comp = self.ev.compile(self._write(source))
        if not comp.ok:
            return False, f"policy ok; compile failed: {comp.error}"
        where = ("Triton's CPU interpreter, the smallest smoke shape" if self.settings.interpreter
                 else "every shape's specialisation on this GPU")
        lines = [f"policy ok; compile ok ({where}, {comp.detail.get('seconds', 0):.1f} s)"]
        if comp.detail.get("nvcc_only"):
            lines.append("CUDA: nvcc -arch=sm_90a compiled CUDA_SRC; it cannot run without a GPU")
        offline = self.settings.interpreter and comp.detail.get("launches") and hasattr(self.ev, "offline_compile")
        stats = comp.detail.get("compile_stats")
        if stats and not offline:  # (in the interpreter they only say that nothing was compiled)
            cs = CompileStats.model_validate(stats)
            if cs.available:  # the largest-register specialisation of each kernel
                cs = cs.model_copy(update={"kernels": list(cs.by_name().values())})
            lines += format_table(cs)
        if offline:
            lines += self._offline(comp.detail["launches"])
        return True, "\n".join(lines)

    def _offline(self, launches: list[CapturedLaunch]) -> list[str]:
        """What ptxas for sm_90 tells of the launches the interpreter ran (aka.evaluate.static.offline_sm90)."""
        off = self.ev.offline_compile(self.draft, launches)
        if not off.ok:
            return [f"offline sm_90 compile failed: {off.error}"]
        cs = CompileStats.model_validate(off.detail["compile_stats"])
        return ["offline sm_90 compile (Triton's ptxas, no GPU; the smallest smoke shape's launches):",
                *format_table(cs)] + ([f"notes: {cs.reason}"] if cs.available and ";" in cs.reason else [])

    def check(self, source: str, shapes: str) -> tuple[bool, str]:
        chk = self.ev.check(source)
        if not chk.ok:
            return False, f"policy check failed: {chk.error}"
        rounds = self.settings.cpu_gate_rounds if self.settings.interpreter else self.settings.gate_rounds
        g = self.ev.gate(self._write(source), [shapes], rounds, self.seed + self.calls)
        verdict = bool(g.passed) and not g.error and all(all(r) for r in g.passed.values())
        head = (f"passed: {g.summary or f'{len(g.passed)} shapes'} ({rounds} rounds of fresh inputs)"
                if verdict else f"failed: {g.error or g.summary or 'a shape failed'}")
        return True, "\n".join([head, *first_errors(g.errors, self.op.spec.tolerances)])

    def time(self, source: str, shapes: list[str]) -> tuple[bool, str]:
        if self.settings.interpreter:
            return False, NEEDS_GPU.format(what="time()")
        known = set(every_case(self.op))
        bad = [s for s in shapes if s not in known]
        if bad:
            return False, f"unknown shape ids {bad}; e.g. {', '.join(sorted(known)[:6])}"
        c = self.ev.compare(self.incumbent, self._write(source), ",".join(shapes))
        if c.error or not c.speedups:
            return False, f"timing failed: {c.error or 'no timings'}"
        per = ", ".join(f"{s} {r:.3f}x" for s, r in c.speedups.items())
        noise = f" ±{c.noise:.1%}" if c.noise is not None else ""
        return True, (f"speedup over the incumbent (paired ABBA medians, >1 is faster): {per}; "
                      f"geomean {c.geomean:.3f}x{noise}")

    def profile(self, source: str, shape: str) -> tuple[bool, str]:
        if self.settings.interpreter:
            return False, NEEDS_GPU.format(what="profile()")
        from aka.knowledge.profile import run_profile

        s = run_profile(self.op, self._write(source), shape, timeout=self.settings.profile_timeout_s)
        return True, "\n".join(profile_lines(s))


def first_errors(errors: dict[str, dict[str, dict[str, Any]]], tolerances: dict[str, Any], k: int = 2) -> list[str]:
    """Per output, the shapes with the largest rel L2 against float64 (beside the plain same-precision
    implementation's, which is what the tolerance was set from)."""
    out = []
    names = sorted({n for per in errors.values() for n in per})
    for name in names:
        rows = [(s, per[name]) for s, per in errors.items() if name in per]
        rows.sort(key=lambda r: -(r[1].get("rel_l2") if r[1].get("rel_l2") is not None else float("inf")))
        tol = tolerances.get(name)
        limit = f" (tolerance {tol.rel_l2:g})" if tol is not None else ""
        cells = [f"{s} {_e(e.get('rel_l2'))} (plain {_e(e.get('plain_rel_l2'))})" for s, e in rows[:k]]
        out.append(f"{name}: worst rel L2{limit}: " + ", ".join(cells))
    return out


def _e(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2e}"


def profile_lines(s) -> list[str]:
    """A ProfileSummary as short lines: per kernel its time and the few counters that steer a plan."""
    lines = [f"{s.shape}: {s.total_us or 0:.1f} µs in kernels ({s.source})"
             + (f", {s.roofline_frac:.0%} of the roofline" if s.roofline_frac else "")]
    for k in sorted(s.kernels, key=lambda k: -(k.duration_us or 0))[:8]:
        nums = [f"{k.duration_us or 0:.1f} µs"] + [f"{label} {v:.0f}%" for label, v in (
            ("dram", k.dram_throughput_pct), ("sm", k.sm_throughput_pct), ("occupancy", k.achieved_occupancy_pct))
            if v is not None]
        stalls = ", ".join(f"{x.reason} {x.fraction:.0%}" for x in k.stalls)
        lines.append(f"- {k.name}: " + ", ".join(nums) + (f"; stalls {stalls}" if stalls else ""))
    if s.compile is not None:
        lines += format_table(s.compile)
    return lines + [f"note: {n}" for n in s.notes[:3]]
