"""Compile statistics of a candidate's Triton kernels: registers, spills, shared memory, warps,
stages, and which sm_90 instructions the compiler actually emitted (wgmma, TMA, mma.sync).

Why: a plan that raises a block size on a kernel that already spills is wasted device time; the
instruction flags tell whether a "use wgmma / TMA" plan took effect at all. Everything here is
read from Triton's own compiled artefacts after the kernels ran once in the worker, so the
numbers are those of the code that was timed.

Where the numbers come from (Triton 3.6 on the device, 3.9 here; both checked):
- ``JITFunction.device_caches[device][0]`` maps a specialisation key to a ``CompiledKernel``
  (3.6 and 3.9 differ in the tuple's length, not in its first item); Triton <= 3.1 had ``.cache``.
- ``CompiledKernel.n_regs`` / ``n_spills`` exist once the kernel was loaded on a device; Triton's
  ``n_spills`` is ``CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4`` (driver.c), i.e. local-memory words.
  When the kernel was never loaded, ``cuobjdump -res-usage`` on the cubin gives REG and STACK + LOCAL.
- ``.metadata.shared`` (dynamic shared bytes), ``.num_warps``, ``.num_stages``; ``.asm['ptx']``
  and ``.asm['sass']`` (3.x computes SASS lazily with the cuobjdump it bundles).
In the CPU interpreter nothing is compiled: :func:`collect` says so instead of returning zeros.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

INTERPRETER = "unavailable: interpreter (Triton's CPU interpreter compiles nothing; run on a GPU)"


class Features(BaseModel):
    """Which tensor-core and async-copy instructions one kernel's code contains."""

    model_config = ConfigDict(frozen=True)
    has_wgmma: bool = Field(False, description="Hopper warpgroup MMA (PTX wgmma.mma_async / SASS HGMMA, QGMMA ...)")
    has_tma: bool = Field(False, description="TMA bulk tensor copies (PTX cp.async.bulk.tensor / SASS UTMALDG ...)")
    has_mma: bool = Field(False, description="warp-level MMA (PTX mma.sync / SASS HMMA, IMMA, DMMA)")
    has_cp_async: bool = Field(False, description="Ampere-style async global->shared copies (cp.async / LDGSTS)")
    local_ldst: int = Field(0, description="local-memory loads+stores in the code (SASS LDL/STL: spills, stack)")


class KernelStats(BaseModel):
    """One compiled specialisation of one Triton kernel."""

    model_config = ConfigDict(frozen=True)
    name: str = Field(description="kernel name as launched (what ncu and the torch profiler print)")
    hash: str = Field("", description="Triton's compilation hash, first 12 characters (tells specialisations apart)")
    n_regs: int | None = Field(None, description="registers per thread (None: not known)")
    n_spills: int | None = Field(None, description="local-memory words per thread (Triton's n_spills; 0 is good)")
    shared_bytes: int = Field(0, description="dynamic shared memory per program, bytes")
    num_warps: int = 0
    num_stages: int = 0
    has_wgmma: bool = False
    has_tma: bool = False
    has_mma: bool = False
    has_cp_async: bool = False
    local_ldst: int = Field(0, description="LDL/STL instructions in the SASS (0 when read from PTX)")
    arch: str = Field("", description="compile target, e.g. sm_90")
    source: Literal["sass", "ptx"] = Field("ptx", description="which code the instruction flags were read from")
    regs_from: Literal["driver", "cuobjdump", "none"] = Field("none", description="where n_regs/n_spills came from")


class CompileStats(BaseModel):
    """Every compiled kernel of a candidate, or why there are none."""

    model_config = ConfigDict(frozen=True)
    available: bool
    reason: str = Field("", description="why unavailable (one line), or notes on how the stats were read")
    kernels: list[KernelStats] = Field(default_factory=list)

    def by_name(self) -> dict[str, KernelStats]:
        """The largest-register specialisation per kernel name (the one most at risk of spilling)."""
        out: dict[str, KernelStats] = {}
        for k in self.kernels:
            if k.name not in out or (k.n_regs or 0) > (out[k.name].n_regs or 0):
                out[k.name] = k
        return out


# ---------------------------------------------------------------------------------------------
# pure parsers (unit-tested on saved snippets)

_PTX = {
    "has_wgmma": re.compile(r"\bwgmma\.mma_async"),
    "has_tma": re.compile(r"\bcp\.async\.bulk\.tensor|\bcp\.reduce\.async\.bulk\.tensor"),
    "has_mma": re.compile(r"\bmma\.sync\.aligned"),
    "has_cp_async": re.compile(r"\bcp\.async\.c[ag]\."),
}
# SASS opcodes: HGMMA (f16/bf16), IGMMA (int8), QGMMA (fp8), BGMMA (binary) are all wgmma.
_SASS = {
    "has_wgmma": re.compile(r"\b[HIQB]GMMA\b"),
    "has_tma": re.compile(r"\bUTMA(LDG|STG|REDG|PF)\b"),
    "has_mma": re.compile(r"\b[HID]MMA\b"),
    "has_cp_async": re.compile(r"\bLDGSTS\b"),
}
_LOCAL = re.compile(r"\b(LDL|STL)(\.[A-Z0-9]+)*\s")


def ptx_features(ptx: str) -> Features:
    """Instruction flags from PTX text (no local-memory count: PTX has no spills, ptxas makes them)."""
    return Features(**{k: bool(rx.search(ptx)) for k, rx in _PTX.items()})


def sass_features(sass: str) -> Features:
    """Instruction flags and the LDL/STL count from SASS text (cuobjdump/nvdisasm output)."""
    flags = {k: bool(rx.search(sass)) for k, rx in _SASS.items()}
    return Features(**flags, local_ldst=len(_LOCAL.findall(sass)))


_RES_FN = re.compile(r"Function\s+([\w$.]+)\s*:\s*\n\s*(.*)")
_RES_KV = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """``cuobjdump -res-usage`` output -> {function: {"REG": .., "LOCAL": .., "SHARED": .., "STACK": ..}}."""
    return {m.group(1): {k: int(v) for k, v in _RES_KV.findall(m.group(2))} for m in _RES_FN.finditer(text)}


# ---------------------------------------------------------------------------------------------
# finding compiled kernels (defensive across Triton versions)


def find_kernels(module: ModuleType | dict[str, Any]) -> dict[str, Any]:
    """Module-level JITFunctions, unwrapping Autotuner/Heuristics (``.fn`` chains); name -> JITFunction."""
    names = vars(module) if isinstance(module, ModuleType) else module
    out: dict[str, Any] = {}
    for name, obj in names.items():
        jit = unwrap_jit(obj)
        if jit is not None:
            out[name] = jit
    return out


def unwrap_jit(obj: Any, depth: int = 4) -> Any:
    for _ in range(depth):
        if obj is None or isinstance(obj, (type, ModuleType)):
            return None
        if hasattr(obj, "device_caches") or (hasattr(obj, "cache") and hasattr(obj, "arg_names")):
            return obj
        obj = getattr(obj, "fn", None)  # Autotuner / Heuristics wrap the JITFunction in .fn
    return None


def compiled_kernels(jit: Any) -> list[Any]:
    """Every CompiledKernel in a JITFunction's caches, whatever the Triton 3.x layout."""
    found: list[Any] = []
    caches = getattr(jit, "device_caches", None)
    if isinstance(caches, dict):  # 3.3+: {device: (kernel_cache, [kernel_key_cache,] target, backend, binder)}
        for entry in list(caches.values()):
            first = entry[0] if isinstance(entry, (tuple, list)) and entry else entry
            if isinstance(first, dict):
                found.extend(first.values())
    old = getattr(jit, "cache", None)
    if isinstance(old, dict):  # <= 3.1: {device: {key: kernel}}
        for per_device in old.values():
            if isinstance(per_device, dict):
                found.extend(per_device.values())
    return [k for k in found if hasattr(k, "metadata") and hasattr(k, "asm")]  # skips pending futures


# ---------------------------------------------------------------------------------------------
# one compiled kernel -> KernelStats


def stats_of(kernel: Any, cuobjdump: str | None = None) -> KernelStats:
    """Read one CompiledKernel. SASS when Triton can disassemble, else PTX; registers from the
    driver when the kernel was loaded, else from ``cuobjdump -res-usage`` on its cubin."""
    md = kernel.metadata
    asm = kernel.asm
    feats, source = _features(asm)
    n_regs, n_spills = getattr(kernel, "n_regs", None), getattr(kernel, "n_spills", None)
    regs_from = "driver" if n_regs is not None else "none"
    if n_regs is None:
        usage = res_usage(asm.get("cubin") if hasattr(asm, "get") else None, cuobjdump).get(md.name)
        if usage and "REG" in usage:
            # Spills live in the stack frame (STACK); the driver's local size, which Triton reports as
            # n_spills * 4, is STACK + LOCAL (H200 2026-11-29: _fwd_kernel driver 88 B, cuobjdump LOCAL 0).
            local = usage.get("STACK", 0) + usage.get("LOCAL", 0)
            n_regs, n_spills, regs_from = usage["REG"], local // 4, "cuobjdump"
    target = getattr(md, "target", None)
    arch = getattr(target, "arch", None)
    return KernelStats(
        name=md.name, hash=str(getattr(md, "hash", "") or getattr(kernel, "hash", ""))[:12],
        n_regs=n_regs, n_spills=n_spills, shared_bytes=int(getattr(md, "shared", 0) or 0),
        num_warps=int(getattr(md, "num_warps", 0) or 0), num_stages=int(getattr(md, "num_stages", 0) or 0),
        arch=f"sm_{arch}" if isinstance(arch, int) else str(arch or ""), source=source, regs_from=regs_from,
        **feats.model_dump(),
    )


def _features(asm: Any) -> tuple[Features, Literal["sass", "ptx"]]:
    try:
        sass = asm["sass"]  # lazily disassembled by Triton; needs its bundled cuobjdump
    except Exception:  # no cubin, no cuobjdump, or an older Triton without the lazy key
        sass = None
    if isinstance(sass, str) and sass.strip():
        ptx = asm.get("ptx", "") if hasattr(asm, "get") else ""
        f = sass_features(sass)
        # wgmma/TMA from PTX too: a SASS printer that lacks an opcode name must not hide them
        p = ptx_features(ptx) if ptx else Features()
        merged = {k: getattr(f, k) or getattr(p, k) for k in ("has_wgmma", "has_tma", "has_mma", "has_cp_async")}
        return Features(**merged, local_ldst=f.local_ldst), "sass"
    ptx = asm.get("ptx", "") if hasattr(asm, "get") else ""
    return ptx_features(ptx or ""), "ptx"


def cuobjdump_path() -> str | None:
    """Triton's bundled cuobjdump (knobs.nvidia.cuobjdump), else one on PATH."""
    import shutil

    try:
        from triton import knobs

        path = knobs.nvidia.cuobjdump.path
        if path and Path(path).is_file():
            return str(path)
    except Exception:  # older Triton without knobs, or no nvidia backend
        pass
    return shutil.which("cuobjdump")


def res_usage(cubin: bytes | None, cuobjdump: str | None = None) -> dict[str, dict[str, int]]:
    """``cuobjdump -res-usage`` of a cubin; {} when there is no cubin or no cuobjdump."""
    tool = cuobjdump or cuobjdump_path()
    if not cubin or not tool:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        try:
            out = subprocess.run([tool, "-res-usage", fh.name], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return {}
    return parse_res_usage(out.stdout)


# ---------------------------------------------------------------------------------------------
# the collector the worker calls after the candidate ran once


def _stats_file(kernel: Any) -> Path | None:
    """Where a kernel's statistics are kept: beside Triton's cache (emptied with it), by Triton's own hash of
    the compiled kernel. A candidate that moves one CONFIG value recompiles a few of gdn_prefill's 57-74
    kernels; reading all of them again cost 10-16 s of its compile call on the H200 (2026-12-04)."""
    h = str(getattr(kernel.metadata, "hash", "") or "")
    if not re.fullmatch(r"[0-9a-zA-Z_-]{16,128}", h):
        return None
    root = os.environ.get("TRITON_CACHE_DIR") or str(Path.home() / ".triton" / "cache")
    return Path(root) / "aka-compstats" / f"{h}.json"


def _cached(kernel: Any) -> KernelStats | None:
    try:
        path = _stats_file(kernel)
        return None if path is None else KernelStats.model_validate_json(path.read_text())
    except (OSError, ValueError, AttributeError):  # absent, torn or from another version: read again
        return None


def _keep(kernel: Any, stats: KernelStats) -> None:
    try:
        path = _stats_file(kernel)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(stats.model_dump_json())
        os.replace(tmp, path)
    except (OSError, AttributeError):  # a read-only cache costs only the next read
        pass


_FOUND: list[tuple[str, Any]] = []  # what _read_forked's children read, by index (inherited by fork, never pickled)


def _read(item: tuple[str, Any]) -> KernelStats | str:
    try:
        return stats_of(item[1])
    except Exception as exc:  # one unreadable artefact must not cost the others
        return f"{item[0]}: {type(exc).__name__}: {exc}"[:160]


def _read_nth(i: int) -> KernelStats | str:
    return _read(_FOUND[i])


def _read_forked(found: list[tuple[str, Any]], workers: int) -> list[KernelStats | str] | None:
    """The kernels read in forked processes (None if they could not start: then read here). Threads did
    not help: a gdn_prefill compile call still spent 10-16 s reading 57-74 kernels with 3-16 threads (H200,
    2026-12-04), the SASS parsed under one interpreter lock. The children touch no CUDA: the registers
    come from the loaded kernel's attributes or from cuobjdump."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _FOUND
    _FOUND = found
    try:
        with ProcessPoolExecutor(min(workers, len(found)), mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_read_nth, range(len(found))))
    except (OSError, BrokenProcessPool):  # a child that died loses no kernel: all are read here again
        return None
    finally:
        _FOUND = []


def collect(module: ModuleType | dict[str, Any], interpreter: bool | None = None, workers: int = 1) -> CompileStats:
    """Compile statistics of every kernel ``module`` launched so far (call it after a warm-up call).

    interpreter: True when the kernels ran in Triton's CPU interpreter (None: read TRITON_INTERPRET).
    workers: processes reading kernels side by side (each one's SASS is a cuobjdump run and a parse: the
    compile call of one gdn_prefill candidate reads 57-74 kernels).
    Never raises for a kernel it cannot read: that kernel is left out and named in ``reason``.
    """
    if interpreter is None:
        from aka.evaluate.host.interp import interpreter_requested

        interpreter = interpreter_requested()
    if interpreter:
        return CompileStats(available=False, reason=INTERPRETER)
    found = [(name, kernel) for name, jit in find_kernels(module).items() for kernel in compiled_kernels(jit)]
    known = {i: hit for i, (_, k) in enumerate(found) if (hit := _cached(k)) is not None}
    todo = [x for i, x in enumerate(found) if i not in known]
    read = _read_forked(todo, workers) if workers > 1 and len(todo) > 1 else None
    if read is None:
        read = [_read(x) for x in todo]
    for (_, k), r in zip(todo, read):
        if isinstance(r, KernelStats):
            _keep(k, r)
    read_all = [*known.values(), *read]
    stats = [r for r in read_all if isinstance(r, KernelStats)]
    failed = [r for r in read_all if isinstance(r, str)]
    if not stats:
        why = "no compiled Triton kernels found (was the candidate called before collecting?)"
        return CompileStats(available=False, reason="; ".join([why, *failed]))
    stats.sort(key=lambda s: (s.name, s.hash))
    return CompileStats(available=True, reason="; ".join(f"unreadable {f}" for f in failed), kernels=stats)


def merge(parts: list[CompileStats]) -> CompileStats:
    """One candidate's stats from the workers that compiled its shapes (the evaluator splits them):
    kernels united (one per name and hash), available when any worker could read some."""
    kernels = {(k.name, k.hash): k for p in parts if p.available for k in p.kernels}
    reasons = list(dict.fromkeys(p.reason for p in parts if p.reason))
    if not kernels:
        return CompileStats(available=False, reason="; ".join(reasons) or "no compile statistics")
    return CompileStats(available=True, reason="; ".join(reasons), kernels=sorted(kernels.values(),
                                                                                 key=lambda k: (k.name, k.hash)))


def format_table(cs: CompileStats) -> list[str]:
    """Plain lines for the CLI and for prompts: one kernel per line."""
    if not cs.available:
        return [f"compile stats: {cs.reason}"]
    lines = []
    for k in cs.kernels:
        inst = ",".join(n for n, on in (("wgmma", k.has_wgmma), ("tma", k.has_tma), ("mma", k.has_mma),
                                          ("cp.async", k.has_cp_async)) if on) or "no tensor-core/async ops"
        lines.append(f"{k.name}[{k.hash[:6]}]: regs {k.n_regs} spills {k.n_spills} smem {k.shared_bytes} B "
                     f"warps {k.num_warps} stages {k.num_stages} {k.arch} {inst} (from {k.source}, regs {k.regs_from})")
    return lines
