"""Registers, spills and shared memory of a candidate's Triton kernels without a GPU: compile them for sm_90.

In Triton's CPU interpreter nothing is compiled (aka.evaluate.static.compstats says so), yet a plan that spills is
worth knowing about before a GPU ever runs it. Triton compiles for a target it is told about,
with the ptxas it bundles, on any machine. So: while the candidate runs once in the interpreter,
:func:`capture` notes each launch (kernel, argument kinds, constexpr values, num_warps/num_stages);
then :func:`compile_task`, in a worker without the interpreter, compiles those specialisations with
``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`` and reads them as the GPU path
does (aka.evaluate.static.compstats.stats_of: cuobjdump -res-usage on the cubin). The numbers are ptxas's for the
launches of the shape that ran (heads and sizes of a small smoke case), not of every full shape,
and Triton's integer specialisation (divisibility by 16) is not reproduced: registers can differ
slightly from the GPU's. Measured here: gdn_prefill's three kernels in about 10 s on 2 cores.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any

from aka.evaluate.static.compstats import CompileStats
from aka.evaluate.wire import CapturedLaunch, OfflinePayload

TARGET = ("cuda", 90, 32)  # Hopper, warp size 32
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64", "int8": "i8",
           "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1",
           "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


def _kind(v: Any) -> dict[str, Any]:
    import torch

    if isinstance(v, torch.Tensor):
        return {"tensor": str(v.dtype).removeprefix("torch.")}
    for name, t in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if isinstance(v, t):
            return {name: v}
    return {"none": True} if v is None else {"other": repr(v)[:80]}


@contextmanager
def capture():
    """Record the Triton launches made inside the block (interpreter only); yields the list it fills."""
    from triton.runtime import interpreter

    launches: dict[str, CapturedLaunch] = {}
    original = interpreter.InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        names = self.arg_names
        a = {n: _kind(v) for n, v in zip(names, args)}
        a.update({k: _kind(v) for k, v in kwargs.items() if k in names})
        opts = {k: v for k, v in kwargs.items() if k in ("num_warps", "num_stages") and isinstance(v, int)}
        rec = CapturedLaunch(name=self.fn.__name__, args=a, options=opts)
        launches.setdefault(json.dumps(rec.model_dump(), sort_keys=True), rec)
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    out: list[CapturedLaunch] = []
    interpreter.InterpretedFunction.run = run
    try:
        yield out
    finally:
        interpreter.InterpretedFunction.run = original
        out.extend(launches.values())


def signature(fn, args: dict[str, dict[str, Any]]) -> tuple[dict[str, str], dict[str, Any]]:
    """Triton's (signature, constexprs) for one captured launch of JITFunction ``fn``."""
    sig: dict[str, str] = {}
    consts: dict[str, Any] = {}
    for p in fn.params:
        v = args.get(p.name)
        if v is None:  # not passed: the parameter's default
            continue
        kind, val = next(iter(v.items()))
        if p.is_constexpr or kind == "none":
            sig[p.name], consts[p.name] = "constexpr", None if kind == "none" else val
        elif kind == "tensor":
            sig[p.name] = "*" + _DTYPES.get(val, "fp32")
        elif kind == "bool":
            sig[p.name] = "i1"
        elif kind == "int":
            sig[p.name] = "i32" if -(2**31) <= val < 2**31 else "i64"
        elif kind == "float":
            sig[p.name] = "fp32"
        else:
            raise ValueError(f"argument {p.name}: {kind} {val!r} has no Triton type")
    return sig, consts


def compile_task(payload: OfflinePayload) -> CompileStats:
    """Worker entry (no interpreter): CompileStats of the captured launches compiled for sm_90."""
    from pathlib import Path

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from aka.contract.ops import load_module
    from aka.evaluate.static.compstats import stats_of, unwrap_jit

    module = load_module(Path(payload.path))
    stats, failed = [], []
    for launch in payload.launches:
        try:
            fn = unwrap_jit(getattr(module, launch.name))
            sig, consts = signature(fn, launch.args)
            kernel = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget(*TARGET),
                                    options=launch.options)
            stats.append(stats_of(kernel))
        except Exception as exc:  # one kernel that does not compile must not cost the others
            failed.append(f"{launch.name}: {type(exc).__name__}: {' '.join(str(exc).split())[-200:]}")
    note = "ptxas for sm_90 on the launches of the smallest smoke shape"
    cs = (CompileStats(available=True, reason="; ".join([note, *failed]), kernels=stats) if stats
          else CompileStats(available=False, reason="; ".join(failed) or "no Triton launch was captured"))
    return cs
