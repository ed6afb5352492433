"""Front matter of wiki pages: pydantic models, strict (extra="forbid"), so a typo fails `aka wiki check`.

A page is markdown with a YAML front matter block. Hardware pages carry their numbers as typed
facts, each with its own source, so "every number sourced" is checked by the schema itself rather
than by reading prose. Other cards cite their sources in `sources`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

KINDS = ("hardware", "technique", "anti-pattern", "op-note")
# Folder under wiki/ for each kind; a page in the wrong folder is a check error.
FOLDERS = {"hardware": "hardware", "technique": "techniques", "anti-pattern": "anti-patterns", "op-note": "op-notes"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Fact(_Strict):
    """One number (or capability flag) about a part, with where it comes from."""

    value: int | float | bool
    source: str = Field(min_length=8, description="document, table or measurement this value comes from")
    kind: Literal["spec", "measured", "derived"] = Field(
        "spec", description="vendor spec, measured on a machine (say where and when), or derived (say how)"
    )
    note: str = Field("", description="caveats: dense vs sparse, which variant, units")


class Facts(_Strict):
    """The numbers that matter for kernels. Every field is optional: unknown beats wrong."""

    sm_count: Fact | None = Field(None, description="streaming multiprocessors")
    l2_bytes: Fact | None = Field(None, description="L2 cache, bytes")
    smem_per_sm_bytes: Fact | None = Field(None, description="max shared memory per SM, bytes")
    smem_per_block_optin_bytes: Fact | None = Field(None, description="max dynamic shared memory per block (opt-in)")
    regs_per_sm: Fact | None = Field(None, description="32-bit registers per SM")
    max_regs_per_thread: Fact | None = Field(None, description="registers one thread may use")
    max_warps_per_sm: Fact | None = Field(None, description="resident warps per SM")
    memory_bytes: Fact | None = Field(None, description="device memory, bytes (as marketed)")
    hbm_bandwidth_gbs: Fact | None = Field(None, description="peak device-memory bandwidth, GB/s")
    fp64_tflops: Fact | None = Field(None, description="FP64 vector rate, TFLOP/s")
    fp32_tflops: Fact | None = Field(None, description="FP32 vector (non-tensor) rate, TFLOP/s")
    tf32_dense_tflops: Fact | None = Field(None, description="TF32 tensor-core rate without sparsity")
    bf16_dense_tflops: Fact | None = Field(None, description="BF16 tensor-core rate without sparsity")
    fp16_dense_tflops: Fact | None = Field(None, description="FP16 tensor-core rate without sparsity")
    fp8_dense_tflops: Fact | None = Field(None, description="FP8 tensor-core rate without sparsity")
    fp4_dense_tflops: Fact | None = Field(None, description="FP4 tensor-core rate without sparsity")
    tma: Fact | None = Field(None, description="bulk tensor copy engine (TMA) present")
    wgmma: Fact | None = Field(None, description="warpgroup MMA (wgmma, sm_90a) available")
    tcgen05: Fact | None = Field(None, description="5th-gen tensor-core MMA with tensor memory (sm_100a)")
    measured_copy_gbs: Fact | None = Field(None, description="device-to-device copy, read+write bytes, GB/s")
    measured_bf16_gemm_tflops: Fact | None = Field(None, description="large bf16 GEMM on random data")

    def present(self) -> dict[str, Fact]:
        return {k: v for k, v in self if v is not None}


class CardMeta(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9\-]*$", description="unique id; equals the file name")
    kind: Literal[KINDS]  # type: ignore[valid-type]
    title: str = Field(min_length=3)
    arch: list[str] = Field(default_factory=list, description="sm_XX list; empty: applies to any arch")
    ops: list[str] = Field(default_factory=list, description="ops this page is about; empty: any op")
    tags: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list, description="papers, code paths, datasheets, measurements")
    # Hardware pages only.
    names: list[str] = Field(default_factory=list, description="exact device names (torch / nvidia-smi) it covers")
    capability: str | None = Field(None, pattern=r"^\d+\.\d+$", description="compute capability, e.g. 9.0")
    facts: Facts | None = None

    @model_validator(mode="after")
    def _shape(self) -> CardMeta:
        for a in self.arch:
            if not a.startswith("sm_") or not a[3:].rstrip("a").isdigit():
                raise ValueError(f"arch entry {a!r} is not of the form sm_90 / sm_90a")
        hw_fields = bool(self.names or self.capability or self.facts)
        if self.kind == "hardware":
            if not (self.names and self.capability and self.facts and len(self.arch) == 1):
                raise ValueError("a hardware page needs names, capability, facts and exactly one arch")
        elif hw_fields:
            raise ValueError("names, capability and facts belong on hardware pages only")
        if self.kind == "op-note" and len(self.ops) != 1:
            raise ValueError("an op-note names exactly one op")
        return self


class Card(BaseModel):
    """A loaded page: validated front matter, markdown body and where it came from."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    meta: CardMeta
    body: str
    path: Path

    @property
    def id(self) -> str:
        return self.meta.id

    def prompt_text(self) -> str:
        """What a planner sees: id, title and body (hardware facts rendered as a list)."""
        head = f"### [{self.meta.id}] {self.meta.title}\n"
        facts = ""
        if self.meta.facts is not None:
            facts = "".join(f"- {k}: {f.value}\n" for k, f in self.meta.facts.present().items())
        return head + facts + self.body.strip() + "\n"
