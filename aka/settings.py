"""Typed settings of `aka optimize`: every knob is a pydantic field with a one-line docstring."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from aka.config import LLMSettings
from aka.contract.shapes import ShapeSet, gated_sets


class PromotionRules(BaseModel):
    """The Supervisor's thresholds; decide() reads nothing else."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    min_gain: float = Field(0.01, ge=0, description="geomean gain a promotion needs (0.01 = 1%)")
    shape_margin: float = Field(0.05, ge=0, description="largest per-shape slowdown a promotion accepts (0.05 = 5%)")
    allow_shape_regression: bool = Field(False, description="accept shapes slower than the margin")

    @property
    def remeasure_above(self) -> float:
        """A screen gain above this earns the ABBA re-measure (and, on a GPU, the screen's gate): half of
        min_gain, since the screen's short sampling reads a real gain low as often as high."""
        return self.min_gain / 2


CPU_MAX_CANDIDATES = 3  # interpreter candidates take ~20 s each on 2 cores: a short out-of-the-box run


class Budget(BaseModel):
    """When a run stops: candidates, wall time, tokens, rounds without improvement."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_candidates: int = Field(20, ge=1, description="candidates evaluated in the whole run (--budget)")
    max_time_s: float | None = Field(None, gt=0, description="wall-clock seconds of evaluation, summed over resumes "
                                     "(the timing deferred past the candidates fits in what they leave)")
    max_tokens: int | None = Field(None, gt=0, description="backend tokens (input + output) over the run")
    patience: int | None = Field(None, ge=1, description="stop after this many attempts without a new best")


def default_candidates(interpreter: bool) -> int:
    """`--budget` when not given: the field's default on a GPU, CPU_MAX_CANDIDATES in the interpreter."""
    return CPU_MAX_CANDIDATES if interpreter else Budget.model_fields["max_candidates"].default


class OptimizeSettings(BaseModel):
    """Everything one `aka optimize` run was started with; stored in run.json and reused on resume."""

    model_config = ConfigDict(extra="forbid")
    op: str = Field(description="operator line to optimize")
    budget: Budget = Field(default_factory=Budget, description="stop conditions")
    rules: PromotionRules = Field(default_factory=PromotionRules, description="promotion thresholds")
    backend: str = Field("offline", description="planner/codegen backend: offline (no API key), anthropic, "
                         "openai (or any OpenAI-compatible server with --base-url), replay (with --from RUN)")
    commit: bool = Field(True, description="commit a promoted kernel to git (--no-commit: only write it)")
    seed: int = Field(0, description="seed for the search and the gate's input rounds")
    gate_rounds: int = Field(3, ge=1, description="gate rounds (fresh inputs each) on every shape set on the GPU")
    interpreter: bool = Field(False, description="run kernels in Triton's CPU interpreter (set when no GPU)")
    cpu_gate_rounds: int = Field(2, description="gate rounds in the interpreter (at least 2: what actually runs)")
    cpu_gate_sets: list[str] = Field(
        default_factory=lambda: [s.value for s in gated_sets(gpu=False)],
        description="shape sets gated in the interpreter (gdn_prefill: ~60 s for 3 candidates on 2 cores)",
    )
    cpu_bench_shapes: str = Field(ShapeSet.SMOKE.value, description="shape set (or ids) timed in the interpreter")
    timeout_s: float = Field(300.0, gt=0, description="per worker call: a hung candidate fails after this")
    prepare_ahead: int = Field(
        1, ge=0, description="later candidates generated and compiled (in parallel) while one is timed"
    )
    head_start: bool = Field(
        True, description="GPU: the first candidates are planned, written and compiled once the incumbent has "
        "compiled, while the set-up gates and times it (gdn_prefill's first candidate waited 67 s for its "
        "compile after a 92 s set-up, H200 2026-12-04)")
    gpus: int = Field(1, ge=1, description="candidates measured at once, one GPU each (above 1: Ray workers on "
                      "this machine; in the interpreter, CPU workers standing in for GPUs)")
    cluster: str | None = Field(None, description="Ray cluster address (ray://HOST:PORT, or 'auto' inside a Ray "
                                "job): candidates measured on its GPU workers; the driver plans, compiles and commits")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="model, endpoint, language, repairs (LLM runs)")
    screen_gate_rounds: int = Field(
        2, ge=2, description="GPU screen: gate rounds on the small sets (at least 2: the cached-result check); a "
        "candidate the ABBA re-measure would promote is gated again with gate_rounds fresh rounds before the full "
        "set (H200, 2026-12-03: 3 rounds of smoke+edge took 9-17 s of a 25-33 s gdn_prefill screen)")
    spare_workers: int = Field(
        4, ge=0, description="GPU: worker processes kept started ahead (Python, torch, CUDA and the candidate's "
        "process ready), each taken by one task; the H200 paid ~8 s of process start per screen without them")
    compile_split: int = Field(
        3, ge=1, description="GPU: processes compiling one candidate's Triton specialisations side by side (at "
        "least; up to half the cores over the compiles running: the set-up's two and the first candidate's get more)")
    screen_time_cap_s: float = Field(
        0.25, gt=0, description="GPU screen: sampling seconds per shape and implementation (the incumbent is "
        "timed beside each candidate; 40 candidates must fit in minutes)"
    )
    screen_verify_shapes: int = Field(
        2, ge=1, description="GPU screen: shapes (drawn per candidate) whose timed outputs are checked against "
        "float64; the ABBA re-measure checks every shape")
    compare_time_cap_s: float = Field(1.5, gt=0, description="GPU ABBA re-measurement: seconds per shape")
    profile: bool = Field(True, description="GPU: profile the incumbent with ncu for the plans: from the cache, "
                         "else after the candidates (about a minute)")
    profile_timeout_s: float = Field(150.0, gt=0, description="cap on that profile (G1 under ncu: ~60 s on the H200)")
    profile_slow_shapes: int = Field(
        2, ge=0, description="GPU: kernel durations (torch profiler) of the incumbent on this many slowest shapes too, "
        "so the plans see where its time goes")
    competitors: bool = Field(True, description="GPU: time the contract's competitors (fla, sdpa) for the summary: "
                             "from the cache, else after the candidates")
    competitors_timeout_s: float = Field(
        180.0, gt=0, description="cap on that setup timing: on a fresh machine fla autotunes per head layout "
        "(H200, 2026-11-29: over 300 s for the 10 gdn_prefill shapes, the whole --max-time of that run)",
    )

    @field_validator("cpu_gate_rounds")
    @classmethod
    def _two_rounds(cls, v: int) -> int:
        # the gate raises 1 to 2 anyway (its cached-result check needs two calls): say what runs
        if v < 2:
            raise ValueError(f"cpu_gate_rounds={v}: the gate needs at least 2 rounds (cached-result check); use 2")
        return v
