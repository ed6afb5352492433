"""A fake evaluator and a temporary project for loop tests.

Candidates are tiny Python sources whose comments tell the fake what to report, e.g.
``# speed=1.2`` (20% faster than the baseline everywhere), ``# gate=fail``, ``# compile=fail``,
``# slow=G2:0.8`` (shape G2 at 0.8x of the speed). The fake reports GPU timings only when built
with timing="gpu" — an explicit injection that the CLI cannot reach.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

from aka.evaluate.parent.outcomes import BenchOutcome, CompareOutcome, StageOutcome
from aka.records import GateRecord

REPO = Path(__file__).resolve().parents[2]


def source(speed: float = 1.0, tag: str = "", **marks: str) -> str:
    lines = [f"# speed={speed}", f"# tag={tag}"] + [f"# {k}={v}" for k, v in marks.items()]
    return "\n".join(lines) + "\ndef gdn_prefill(**kw):\n    return None\n"


def marks(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# (\w+)=(\S+)", text, re.M))


class FakeEvaluator:
    def __init__(self, op, timing: str = "gpu", noise: float = 0.002, delay_s: float = 0.0, drift: float = 1.0,
                 paired: bool = False, screen_delay_s: float = 0.0):
        self.op = op
        # drift: screen times read `drift` times the setup's (a busier or hotter GPU later in the run);
        # paired: the screen times the incumbent beside the candidate, under the same drift
        self.drift, self.paired = drift, paired
        self.timing = timing
        self.rank = "eager"  # the contract's rank_timing on a GPU; tests of graph ranking set "graph"
        self.noise = noise
        self.delay_s = delay_s
        self.screen_delay_s = screen_delay_s  # a measurement long enough to kill its worker in the middle
        self.calls: list[str] = []
        self.competitor_timeouts: list[float | None] = []  # the cap each competitor timing was given

    def device(self) -> dict[str, Any]:
        interp = self.timing != "gpu"
        return {"name": "fake H200" if not interp else "cpu (fake)", "interpreter": interp, "sms": 132,
                "torch": "x", "triton": "y", "driver": "z"}

    def _speed(self, path: Path, shape: str) -> float:
        m = marks(Path(path).read_text())
        speed = float(m.get("speed", 1.0))
        slow = m.get("slow", "")
        if slow.startswith(shape + ":"):
            speed *= float(slow.split(":")[1])
        return speed

    def check(self, src: str) -> StageOutcome:
        self.calls.append("check")
        return StageOutcome(marks(src).get("check") != "fail", "fake policy refusal")

    def compile(self, path: Path, cases: list[str] | None = None, stats: bool = True) -> StageOutcome:
        self.calls.append("compile" if cases is None else f"compile:{len(cases)}")
        time.sleep(self.delay_s)
        ok = marks(Path(path).read_text()).get("compile") != "fail"
        return StageOutcome(ok, "" if ok else "SyntaxError: fake")

    def gate(self, path: Path, sets: list[str], rounds: int, seed: int) -> GateRecord:
        self.calls.append("gate:" + "+".join(sets))
        fail = marks(Path(path).read_text()).get("gate") == "fail"
        passed = {c.id: [not fail] * rounds for s in sets for c in self.op.cases(s)}
        return GateRecord(passed=passed, error="S1: rel_l2 3e-1 > 1e-2" if fail else "")

    def screen(self, path: Path, sets: list[str], rounds: int, seed: int, shapes: str, incumbent: Path | None = None):
        time.sleep(self.screen_delay_s)
        g = self.gate(path, sets, rounds, seed)
        if g.error:
            return g, None
        b = self.bench(path, shapes)
        b.times_us = {k: v * self.drift for k, v in b.times_us.items()}
        if self.paired and incumbent is not None:
            b.incumbent_us = {c.id: 100.0 * self.drift / self._speed(incumbent, c.id) for c in self.op.cases(shapes)}
        return g, b

    def bench(self, path: Path, shapes: str, beside: Path | None = None,
              names: tuple[str, str] = ("candidate", "incumbent")) -> BenchOutcome:
        self.calls.append("bench")
        b = BenchOutcome({c.id: 100.0 / self._speed(path, c.id) for c in self.op.cases(shapes)}, self.timing)
        if beside is not None:
            b.incumbent_us = {c.id: 100.0 / self._speed(beside, c.id) for c in self.op.cases(shapes)}
        return b

    def competitors(self, shapes: str, timeout: float | None = None) -> tuple[dict[str, dict[str, float]], list[str]]:
        self.calls.append("competitors")
        self.competitor_timeouts.append(timeout)
        return {"fla": {c.id: 90.0 for c in self.op.cases(shapes)}}, ["sdpa: ImportError: fake"]

    def compare(self, incumbent: Path, candidate: Path, shapes: str) -> CompareOutcome:
        self.calls.append("compare")
        if marks(Path(candidate).read_text()).get("abba") == "wrong":  # the checker rejected its timed outputs
            return CompareOutcome({}, None, None, "none", "check: candidate on G3: timed output wrong (eager call 17)")
        sp = {c.id: self._speed(candidate, c.id) / self._speed(incumbent, c.id) for c in self.op.cases(shapes)}
        from aka.evaluate.host.bench import geomean

        return CompareOutcome(sp, geomean(list(sp.values())), self.noise, self.timing)


def slow_fake(op, settings) -> FakeEvaluator:
    """A Ray worker's evaluator in the pool tests (aka.run.raypool factory): 2 s per screen."""
    return FakeEvaluator(op, timing="interpreter" if settings.interpreter else "gpu", screen_delay_s=2.0)


def make_project(tmp: Path, git: bool = True) -> Path:
    """A minimal aka project (the real gdn_prefill contract, a fake baseline) in a fresh git repo."""
    root = tmp / "proj"
    (root / "workloads").mkdir(parents=True)
    (root / "kernels" / "gdn_prefill").mkdir(parents=True)
    # ranked eagerly, as FakeEvaluator times (the real contract ranks on graph replay); tests of graph
    # ranking append `rank_timing: graph` (YAML keeps the last) or set the evaluator's rank
    contract = (REPO / "workloads" / "gdn_prefill.yaml").read_text().replace("rank_timing: graph\n", "")
    contract = re.sub(r"\n  stages: \[[^\]]*\]", "", contract)  # the fake baseline is its own source
    (root / "workloads" / "gdn_prefill.yaml").write_text(contract)
    (root / "kernels" / "gdn_prefill" / "baseline.py").write_text(source(1.0, "baseline"))
    (root / ".gitignore").write_text("/runs/\n")
    if git:
        for cmd in (["init", "-q", "-b", "main"], ["config", "user.email", "t@example.com"],
                    ["config", "user.name", "t"], ["add", "."], ["commit", "-q", "-m", "init"]):
            subprocess.run(["git", *cmd], cwd=root, check=True, capture_output=True)
    return root
