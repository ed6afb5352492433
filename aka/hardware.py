"""Hardware facts: what the device says about itself, merged with its wiki page.

The device gives name, capability, SM count, L2 and shared-memory limits; the page gives what
the device cannot report (bandwidth, tensor-core rates, TMA/wgmma) with a source for each.
A part is matched by exact device name only: an H200 NVL or an H100 PCIe never borrows the SXM
page's numbers. A part without a page is `known=False` with the reason, never filled in.
"""

from __future__ import annotations

import functools
import os
import subprocess
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aka.wiki.model import Card, Fact

# Detected field -> wiki fact it must agree with (both in the same units).
CROSS_CHECKED = {
    "sm_count": "sm_count",
    "l2_bytes": "l2_bytes",
    "smem_per_sm_bytes": "smem_per_sm_bytes",
    "smem_per_block_optin_bytes": "smem_per_block_optin_bytes",
    "regs_per_sm": "regs_per_sm",
}


class Detected(BaseModel):
    """What the device reports (None: this torch does not expose it)."""

    model_config = ConfigDict(frozen=True)
    name: str
    capability: str  # "9.0"
    sm_count: int | None = None
    l2_bytes: int | None = None
    smem_per_sm_bytes: int | None = None
    smem_per_block_optin_bytes: int | None = None
    regs_per_sm: int | None = None
    total_memory_bytes: int | None = None
    driver: str | None = None


class HardwareFacts(BaseModel):
    """Detected values plus the page's sourced facts; `known` says whether a page matched."""

    model_config = ConfigDict(frozen=True)
    known: bool
    reason: str = Field(description="why known or unknown, one line")
    detected: Detected | None = None
    arch: str | None = None
    page_id: str | None = None
    facts: dict[str, Fact] = Field(default_factory=dict, description="from the matched page only")
    mismatches: list[str] = Field(default_factory=list, description="detected value != page value")

    def value(self, key: str) -> Any:
        """A fact's value, or None when unknown (callers must handle None, never guess)."""
        f = self.facts.get(key)
        return None if f is None else f.value

    def summary(self) -> dict[str, Any]:
        """Flat dict for planners and the attempts log."""
        out: dict[str, Any] = {"known": self.known, "reason": self.reason, "arch": self.arch, "page": self.page_id}
        out.update({k: f.value for k, f in self.facts.items()})
        if self.detected:  # the device is the truth for what it reports; mismatches are listed apart
            out.update({k: v for k, v in self.detected.model_dump().items() if v is not None})
        if self.mismatches:
            out["mismatches"] = list(self.mismatches)
        return out


def _norm(name: str) -> str:
    return " ".join(name.split()).casefold()


def arch_of(capability: str) -> str:
    major, minor = capability.split(".")
    return f"sm_{major}{minor}"


def merge(detected: Detected | None, pages: list[Card]) -> HardwareFacts:
    """Pure: pick the hardware page whose `names` contains the device name exactly."""
    if detected is None:
        return HardwareFacts(known=False, reason="no GPU: CUDA is not available on this machine")
    arch = arch_of(detected.capability)
    want = _norm(detected.name)
    matches = [c for c in pages if c.meta.kind == "hardware" and want in {_norm(n) for n in c.meta.names}]
    if not matches:
        return HardwareFacts(
            known=False, detected=detected, arch=arch,
            reason=f"unknown part '{detected.name}' (sm {detected.capability}): no wiki/hardware page lists this "
            "name; only detected values are known — add a page with sourced facts",
        )
    if len(matches) > 1:
        ids = ", ".join(c.id for c in matches)
        return HardwareFacts(known=False, detected=detected, arch=arch,
                             reason=f"device name '{detected.name}' is claimed by several pages ({ids}): fix the wiki")
    page = matches[0]
    if page.meta.capability != detected.capability:
        return HardwareFacts(
            known=False, detected=detected, arch=arch,
            reason=f"page '{page.id}' says capability {page.meta.capability}, device reports {detected.capability}",
        )
    facts = page.meta.facts.present() if page.meta.facts else {}
    mismatches = []
    for det_key, fact_key in CROSS_CHECKED.items():
        got, fact = getattr(detected, det_key), facts.get(fact_key)
        if got is not None and fact is not None and got != fact.value:
            mismatches.append(f"{fact_key}: device {got}, page {fact.value} ({fact.source})")
    return HardwareFacts(known=True, detected=detected, arch=arch, page_id=page.id, facts=facts,
                         mismatches=mismatches, reason=f"matched wiki/hardware/{page.path.name} by name")


def _driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = out.stdout.strip().splitlines()
    return line[0].strip() if out.returncode == 0 and line else None


_CLOCKS = {"clocks.max.sm": "sm_max_mhz", "clocks.applications.graphics": "sm_app_mhz", "clocks.max.mem": "mem_max_mhz"}


def clocks(gpu: str | None = None) -> dict[str, int] | None:
    """The GPU's clock limits in MHz from nvidia-smi, or None where it cannot say.

    Limits, not the current clock (an idle H200 reads 345 MHz), because two devices of one model differ
    in what they may run at: a lowered application clock slows every kernel measured on it. `gpu` is
    what nvidia-smi -i takes (an index or a UUID); by default the first of CUDA_VISIBLE_DEVICES, the
    device this process measures on (a Ray worker is pinned to one), else 0."""
    if gpu is None:
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    try:
        out = subprocess.run(["nvidia-smi", "-i", gpu, f"--query-gpu={','.join(_CLOCKS)}",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return None
    got = {}
    for name, value in zip(_CLOCKS.values(), lines[0].split(",")):
        try:
            got[name] = int(float(value))
        except ValueError:  # "[N/A]" where the device does not report one
            pass
    return got or None


def device_record(interpreter: bool) -> dict[str, object]:
    """What a measurement was made on, as run.json, promoted.json and `aka regress` record it: the
    device model (its name keys recorded numbers), SMs, capability, clock limits (where nvidia-smi
    reads them) and the software versions."""
    import platform

    import torch
    import triton

    d = None if interpreter else _query(torch, 0)  # without a GPU, torch's own error says why
    out: dict[str, object] = {"name": "cpu (Triton interpreter)", "interpreter": True, "sms": 0}
    if d is not None:
        out = {"name": d.name, "interpreter": False, "sms": d.sm_count, "capability": arch_of(d.capability)}
        limits = clocks()
        if limits:
            out["clocks"] = limits
    out.update(python=platform.python_version(), torch=torch.__version__, triton=triton.__version__)
    if torch.cuda.is_available():
        out.update(cuda=str(torch.version.cuda), driver=(d.driver if d else _driver()) or "?")
    return out


def detect_device(index: int = 0) -> Detected | None:
    """Query torch (and nvidia-smi for the driver); None when there is no CUDA device."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return _query(torch, index)


def _query(torch, index: int) -> Detected:
    """The one reading of the device's properties: `aka doctor`, the recorded device and the wiki match."""
    p = torch.cuda.get_device_properties(index)

    def prop(name: str) -> int | None:  # older torch lacks some fields: unknown, not zero
        v = getattr(p, name, None)
        return int(v) if v is not None else None

    return Detected(
        name=p.name, capability=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
        l2_bytes=prop("L2_cache_size"), smem_per_sm_bytes=prop("shared_memory_per_multiprocessor"),
        smem_per_block_optin_bytes=prop("shared_memory_per_block_optin"),
        regs_per_sm=prop("regs_per_multiprocessor"), total_memory_bytes=p.total_memory, driver=_driver(),
    )


def detect(pages: list[Card] | None = None, index: int = 0) -> HardwareFacts:
    """Detected device merged with its wiki page (pages default to the project's wiki)."""
    if pages is None:
        from aka.wiki import load_wiki

        pages = load_wiki()
    return merge(detect_device(index), pages)


@functools.cache
def datasheet_peaks() -> tuple[float, float] | None:
    """(bf16 dense TFLOP/s, HBM GB/s) of this process's device from its wiki page; None without a GPU
    or a page (never raises: a missing wiki means no speed-of-light floor, not a failed candidate)."""
    try:
        facts = detect()
    except Exception:
        return None
    tflops, gbs = facts.value("bf16_dense_tflops"), facts.value("hbm_bandwidth_gbs")
    return (float(tflops), float(gbs)) if facts.known and tflops and gbs else None
