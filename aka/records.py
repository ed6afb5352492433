"""What a run records, typed, and where its records are: runs/<op>/<run-id>/ with run.json and
attempts.jsonl. Below every stage, so the stages that write an attempt (agent: plan and usage; run:
measurements and decision) and those that read it back (a backend's history, a report, lessons)
share one model and one reader.

attempts.jsonl keeps the flat layout it has always had (one JSON object per finished attempt), so
logs written before these models existed read back unchanged and an old run resumes; keys a later
version adds are kept (extra="allow") rather than dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from aka.errors import AkaError


class UnknownRunError(AkaError):
    """A run id that has no directory under runs/."""


class AttemptLogError(AkaError):
    """An attempts.jsonl that cannot be read (a bad line other than a torn last one)."""


# -- what the agent stage produces ------------------------------------------------------------


class Plan(BaseModel):
    """One round's intent: a hypothesis, the structural change, and the parameters to try."""

    model_config = ConfigDict(extra="forbid")

    hypothesis: str = Field(description="why the change should be faster, in one or two sentences")
    structural_change: str = Field("", description="the structural change (empty: parameters only)")
    expected_effect: dict[str, str] = Field(
        default_factory=dict, description="expected effect per regime, e.g. {'batch 1, long': '-20%'}"
    )
    risks: list[str] = Field(default_factory=list, description="what could go wrong (correctness, spills)")
    param_ranges: dict[str, list[Any]] = Field(
        default_factory=dict, description="parameter -> values to try (one value: a fixed choice)"
    )
    avoided: list[str] = Field(default_factory=list, description="regions or ideas deliberately avoided, why")
    pattern: str | None = Field(None, description="pattern template the plan builds on, if any")
    cited_wiki: list[str] = Field(default_factory=list, description="wiki card ids the plan relies on")
    cited_evidence: list[str] = Field(default_factory=list, description="measurements the plan relies on")

    def fixed_config(self) -> dict[str, Any]:
        """Parameters with exactly one value: the concrete configuration this plan asks for."""
        return {k: v[0] for k, v in self.param_ranges.items() if len(v) == 1}

    def summary(self) -> str:
        head = f"[{self.pattern}] " if self.pattern else ""
        return head + (self.structural_change or self.hypothesis)


class Usage(BaseModel):
    """Tokens one backend call consumed (all zero for the offline backend)."""

    model_config = ConfigDict(extra="forbid")
    input_tokens: int = 0  # all input, cached or not
    output_tokens: int = 0
    cached_tokens: int = 0  # of the input, read from the provider's prompt cache
    cache_write_tokens: int = 0  # of the input, written to the cache (Anthropic bills them above input)
    cost_usd: float | None = None  # estimate from the config's price table; None: no price known

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def uncached(self) -> int:
        """Input not read from the cache: what is billed at the input price or above."""
        return max(self.input_tokens - self.cached_tokens, 0)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cost_usd=None if self.cost_usd is None and other.cost_usd is None
            else (self.cost_usd or 0.0) + (other.cost_usd or 0.0),
        )


# -- what the run stage measures and decides ------------------------------------------------------

Timing = Literal["gpu", "interpreter", "none"]


class Measurements(BaseModel):
    """What one candidate's evaluation produced; the Supervisor's decide() reads nothing else."""

    model_config = ConfigDict(extra="forbid")
    backend_error: str = Field("", description="the backend gave no usable candidate; empty otherwise")
    check_error: str = Field("", description="static check failure; empty when it passed")
    compile_error: str = Field("", description="compile/import failure; empty when it passed")
    gate: dict[str, list[bool]] = Field(default_factory=dict, description="shape id -> pass per gate round")
    gate_error: str = Field("", description="first gate failure in words")
    gate_sets: list[str] = Field(default_factory=list, description="shape sets the gate covered")
    bench_error: str = Field("", description="timing failure (a shape that crashed or ran out of memory)")
    timing: Timing = Field("none", description="where the timings come from")
    ratios: dict[str, float] = Field(default_factory=dict, description="shape -> incumbent/candidate time")
    expected_shapes: list[str] = Field(default_factory=list, description="full-set shape ids compare must cover")
    screen_gain: float | None = Field(None, description="bench gain over the incumbent when too small to re-measure")
    screen_refused: str = Field("", description="why a GPU screen, timing first, did not gate it (too slow to win)")
    screen_slow_shape: str = Field("", description="the shape that stopped that screen (far slower there), if one")
    geomean: float | None = Field(None, description="geomean speedup over the incumbent (interleaved)")
    noise: float | None = Field(None, description="relative noise of the geomean (e.g. CI half-width)")


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    promote: bool
    verdict: Literal["promoted", "rejected", "not promoted"]
    reason: str
    blocked_by: str = Field("", description="the shape whose paired slowdown beyond the margin refused a candidate "
                            "faster overall (the offline search leaves a structure such shapes keep refusing)")


class CheckRecord(BaseModel):
    ok: bool
    error: str = ""


class CompileRecord(BaseModel):
    """ok and error, plus what the compile step reported (registers, spills, ...: kept as it came)."""

    model_config = ConfigDict(extra="allow")
    ok: bool
    error: str = ""


class GateRecord(BaseModel):
    """The gate's verdict per shape and round, plus its per-shape errors."""

    model_config = ConfigDict(extra="allow")
    sets: list[str] = Field(default_factory=list)
    passed: dict[str, list[bool]] = Field(default_factory=dict)
    error: str = ""
    summary: str = ""
    device: str = Field("", description="the device model the gate ran on")
    rounds: int = 0
    seconds: float = 0.0
    errors: dict[str, dict[str, dict[str, float | None]]] = Field(
        default_factory=dict, description="shape -> output -> worst round's rel_l2 and plain_rel_l2")
    skipped: str = Field("", description="why the gate did not run (timed first and too slow to promote)")
    slow_shape: str = Field("", description="with skipped: the shape on which the timing stopped it")


class BenchRecord(BaseModel):
    model_config = ConfigDict(extra="allow")
    times_us: dict[str, float] = Field(default_factory=dict)
    timing: str = "none"
    error: str = ""
    roofline: Any = None
    incumbent_us: dict[str, float] | None = None  # the incumbent timed beside it (paired screen)
    # the host's cost per call, eager median minus graph replay median (an op ranked on graph replay)
    host_us: dict[str, float] | None = None
    vs_baseline: float | None = None
    vs_incumbent: float | None = None
    paired: bool = False


class CompareRecord(BaseModel):
    """The ABBA re-measure against the incumbent."""

    speedups: dict[str, float] = Field(default_factory=dict)
    geomean: float | None = None
    noise: float | None = None
    timing: str = "none"
    error: str = ""


class Attempt(BaseModel):
    """One line of attempts.jsonl: one candidate from plan to decision."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    n: int
    started: str = ""
    failed_stage: str = Field("", description="'' or the stage that failed: plan, codegen, check, compile, "
                                              "duplicate, gate, bench")
    evidence_offered: list[str] = Field(default_factory=list, description="evidence ids the planner was shown")
    plan: Plan | None = None
    config: dict[str, Any] = Field(default_factory=dict, description="the plan's fixed parameters")
    # codegen: what the backend spent and wrote, and its trace (one entry per LLM and tool call)
    usage: Usage = Field(default_factory=Usage)
    tokens: int = 0
    code_hash: str = ""
    edit: str = Field("", description="compact diff of the candidate against the incumbent")
    llm_calls: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    submit_note: str = ""
    prepare_s: float = 0.0
    stage_s: dict[str, float] = Field(
        default_factory=dict, description="wall seconds per stage: generate (plan + codegen), compile (check + "
        "compile, overlapping the previous candidate's timing), wait (the loop waiting for it), screen, compare, gate")
    check: CheckRecord | None = None
    compile: CompileRecord | None = None
    gate: GateRecord | None = None
    bench: BenchRecord | None = None
    compare: CompareRecord | None = None
    score: float | None = Field(None, description="geomean speedup over the baseline (bench screen)")
    improved: bool = False
    measurements: Measurements | None = None
    decision: Decision | None = None
    duration_s: float = 0.0

    @property
    def promoted(self) -> bool:
        return self.decision is not None and self.decision.promote

    @property
    def times_us(self) -> dict[str, float]:
        return self.bench.times_us if self.bench else {}

    def summary(self) -> str:
        return self.plan.summary() if self.plan else ""

    def to_json(self) -> str:
        """One attempts.jsonl line (no newline)."""
        return json.dumps(self.model_dump(mode="json"), default=str, separators=(",", ":"))


# -- a run's own record: runs/<op>/<run-id>/run.json ---------------------------------------------


class RunDevice(BaseModel):
    """What the run measures on (aka.hardware.device_record)."""

    model_config = ConfigDict(extra="allow")
    name: str = Field("", description="the device model; '' in a record made before the set-up knew it")
    interpreter: bool = False
    sms: int = 0
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None


class IncumbentGate(BaseModel):
    sets: list[str] = Field(default_factory=list)
    ok: bool = True
    error: str = ""


class RunBaseline(BaseModel):
    """The figures the set-up pays for once: the incumbent and the baseline timed side by side, the
    incumbent's gate and compile statistics, the competitors where they were timed."""

    model_config = ConfigDict(extra="allow")
    rank_timing: str | None = Field(None, description="graph or eager: the timing candidates are ranked on "
                                    "(None: a record before the field, eager)")
    shapes: str = Field("", description="the bench shape set")
    hash: str | None = Field(None, description="code_hash of the baseline")
    timing: str = Field("", description="gpu or interpreter")
    incumbent_compile: dict[str, JsonValue] | None = None
    incumbent_gate: IncumbentGate | None = None
    incumbent_roofline: dict[str, float] = Field(default_factory=dict)
    incumbent_us: dict[str, float] = Field(default_factory=dict)
    incumbent_host_us: dict[str, float] = Field(default_factory=dict)
    baseline_us: dict[str, float] = Field(default_factory=dict)
    baseline_host_us: dict[str, float] = Field(default_factory=dict)
    competitors_us: dict[str, dict[str, float]] = Field(default_factory=dict)
    competitors_notes: list[str] = Field(default_factory=list)
    competitors_deferred: str | None = Field(None, description="cache key of competitors timed after the candidates")


class RunIncumbent(BaseModel):
    model_config = ConfigDict(extra="allow")
    label: str = "incumbent"
    path: str = ""
    hash: str = ""
    standing: dict[str, JsonValue] | None = Field(None, description="geomean, shapes and from: where it came from")


class RunPromotion(BaseModel):
    n: int
    commit: str | None = None


class RunRecord(BaseModel):
    """run.json. Every field is optional so that runs written by earlier versions (and tests' minimal
    ones) read back; keys a later version adds are kept. Written with the fields that were set."""

    model_config = ConfigDict(extra="allow")
    run_id: str = ""
    op: str = ""
    started: str = ""
    status: str = ""
    settings: dict[str, JsonValue] = Field(default_factory=dict, description="OptimizeSettings, as dumped")
    device: RunDevice = Field(default_factory=RunDevice)
    baseline: RunBaseline = Field(default_factory=RunBaseline)
    incumbent: RunIncumbent = Field(default_factory=RunIncumbent)
    promoted_at_start: str | None = None
    lessons: list[str] = Field(default_factory=list)
    promotions: list[RunPromotion] = Field(default_factory=list)
    profile: dict[str, JsonValue] | None = None
    summary: dict[str, JsonValue] = Field(default_factory=dict)
    workers: list[JsonValue] = Field(default_factory=list, description="Ray runs: the device of each worker")
    placements: list[JsonValue] = Field(default_factory=list, description="Ray runs: which worker measured what")
    worker_events: list[JsonValue] = Field(default_factory=list)
    setup_steps: dict[str, float] = Field(default_factory=dict)
    setup_s: float = 0.0
    error: str = ""

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_unset=True), indent=2, default=str) + "\n"


# -- what a promotion records: kernels/<op>/promoted.json ---------------------------------------


class DeviceRecord(BaseModel):
    """`aka regress`'s first measurement of the promoted kernel on another device model."""

    model_config = ConfigDict(extra="allow")
    times_us: dict[str, float] = Field(default_factory=dict)
    baseline_us: dict[str, float] | None = None
    timing: str = Field("eager", description="graph or eager; a record without the field predates it: eager")
    measured_at: str | None = None
    code_hash: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None


class ConfigPromotion(BaseModel):
    """A promotion that changed CONFIG values only: kept as those values over baseline.py, not as a copy
    of its code (kernels/<op>/promoted.py is absent; aka.contract.ops.Op.promoted_kernel renders it)."""

    baseline_code: str = Field(description="template_hash of baseline.py (its code outside CONFIG) when promoted")
    changes: dict[str, JsonValue] = Field(description="the CONFIG values set on baseline.py's CONFIG")


class Promoted(BaseModel):
    """kernels/<op>/promoted.json: what was promoted, measured where, and how much faster than what.
    Every field is optional so that files written by earlier versions (and tests' minimal ones) read
    back; keys a later version adds are kept. Written with the fields that were set, only."""

    model_config = ConfigDict(extra="allow")
    op: str = ""
    run_id: str = ""
    attempt: int | None = None
    code_hash: str | None = None
    plan: str = ""
    pattern: str | None = None
    config: dict[str, JsonValue] = Field(default_factory=dict)
    times_us: dict[str, float] = Field(default_factory=dict, description="the screen's medians, µs")
    timing: str = Field("eager", description="graph or eager; a record without the field predates it: eager")
    host_us: dict[str, float] = Field(default_factory=dict, description="eager minus graph replay, µs")
    times_note: str = ""
    speedup_vs_baseline: dict[str, float] = Field(default_factory=dict)
    speedup_vs_previous: dict[str, float] = Field(default_factory=dict)
    geomean_vs_previous: float | None = None
    noise: float | None = None
    geomean_vs_baseline: float | None = None
    baseline_hash: str | None = None
    gate: GateRecord | None = None
    device: str | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None
    decision: str = ""
    devices: dict[str, DeviceRecord] = Field(default_factory=dict)
    over_baseline: ConfigPromotion | None = Field(None, description="set when stored as CONFIG over baseline.py")

    @classmethod
    def parse(cls, text: str) -> Promoted | None:
        """A promoted.json's text; None when it is not a JSON object. A field of a type this version
        does not know (an old or hand-edited file) is dropped, not fatal: the rest stays readable."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(raw, dict):
            return None
        while True:
            try:
                return cls.model_validate(raw)
            except ValidationError as exc:
                bad = {e["loc"][0] for e in exc.errors() if e["loc"]}
                if not bad & set(raw):
                    return None
                raw = {k: v for k, v in raw.items() if k not in bad}

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_unset=True), indent=2, default=str) + "\n"


# -- reading a run back ---------------------------------------------------------------------------


class AmbiguousRunError(UnknownRunError):
    """A run id prefix that more than one run starts with."""


def find_run(runs_root: Path, run_id: str) -> Path:
    """runs/<op>/<run_id>/: the run with exactly this id, else the only run whose id starts with it
    (`aka runs` lists ids in full; a unique prefix is enough to type)."""
    runs = sorted((p for p in runs_root.glob("*/*") if (p / "run.json").is_file()), key=lambda p: p.name)
    if run_id:
        exact = [p for p in runs if p.name == run_id]
        if exact:
            return exact[0]
        hits = [p for p in runs if p.name.startswith(run_id)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            shown = ", ".join(p.name for p in hits[:8]) + (f" and {len(hits) - 8} more" if len(hits) > 8 else "")
            raise AmbiguousRunError(f"run id '{run_id}' is ambiguous: {len(hits)} runs start with it ({shown}); "
                                    "type more of the id")
    raise UnknownRunError(f"unknown run '{run_id}'; `aka runs` lists the runs under {runs_root}")


class RunRecordError(AkaError):
    """A run.json that cannot be read as a run's record."""


def read_run_record(run_dir: Path) -> RunRecord:
    """runs/<op>/<run-id>/run.json as a RunRecord."""
    path = run_dir / "run.json"
    try:
        return RunRecord.model_validate_json(path.read_text())
    except OSError as exc:
        raise RunRecordError(f"{path}: {exc.strerror}; the run directory is incomplete") from None
    except ValidationError as exc:
        raise RunRecordError(f"{path} is not a run record ({_first(exc)}); restore it from a backup or remove "
                             "the run directory") from None


def read_attempts(run_dir: Path) -> list[Attempt]:
    """The finished attempts of runs/<op>/<run-id>/attempts.jsonl, in order ([] when there is none)."""
    log = run_dir / "attempts.jsonl"
    return read_attempt_log(log) if log.is_file() else []


def read_attempt_log(log: Path) -> list[Attempt]:
    """Every record of one attempts log. A torn last line (a run killed mid-write) is skipped; any
    other unreadable line is an error, since dropping it would silently renumber what follows."""
    lines = log.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                continue
            raise AttemptLogError(f"{log}: line {i + 1} is not JSON; fix or remove that line") from None
        try:
            out.append(Attempt.model_validate(data))
        except ValidationError as exc:
            raise AttemptLogError(f"{log}: line {i + 1} is not an attempt record ({_first(exc)}); "
                                  "fix or remove that line") from None
    return out


def _first(exc: ValidationError) -> str:
    e = exc.errors()[0]
    return f"{'.'.join(map(str, e.get('loc', ()))) or 'line'}: {e.get('msg', '')}"[:200]
