"""A candidate's Triton compiles done once each, side by side, before its cases run: the compile call's first
part, and `aka bench`'s head start in the candidate's process (aka.evaluate.host.harness.precompile_kernels).

The compile call (aka.evaluate.checker.tasks.compile_worker) runs every shape case once so that the gate and the
bench find every kernel in Triton's disk cache. Left to the launches, each case compiled its kernels
inside the call's GPU lock, so a screen (exclusive lock) and the next candidates' compiles waited for
each other, and the split workers compiled nearly every specialisation again, since most cases reach
the same ones (H200, 2026-12-03: gdn_prefill moves compiled in 28-76 s on 3 workers; two of seven
candidates waited 11 and 24 s for theirs). So, in the compile call's process, first:

1. :func:`record`: the entry runs on every case with Triton's ``jit_cache_hook`` answering "skip", so
   no kernel is compiled or launched, and each distinct specialisation is noted once (57 for
   gdn_prefill's 23 cases);
2. :func:`compile_forked`: children forked from this process (the candidate already imported, no
   CUDA used in them) compile their share with ``triton.compile`` into the disk cache, as Triton's own
   ``JITFunction.preload`` would, outside the GPU lock.

The cases then run for real and find their kernels in the cache. On the H200 (2026-12-04) the same
two steps in separate processes (a record worker, then preload workers) took the compile call itself
from 28-76 s down to 1.2-7 s, yet starting those processes cost ~20 s a candidate: hence one process
and forks. Best effort: what is missed here the launches compile as before, so nothing here can fail
a candidate; a case that raised while recorded (host code reading outputs no kernel wrote) makes the
caller start over in a clean process (``tainted``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import Any

from aka.evaluate.gpulock import gpu_lock
from aka.evaluate.wire import ChildCompiled, Precompiled


@contextmanager
def _skipping(into: dict[str, dict[str, Any]]):
    """Triton's launches inside the block are noted in `into` and neither compiled nor run."""
    from triton import knobs
    from triton.runtime import driver

    target = driver.active.get_current_target()  # Triton 3.6's description leaves it out

    def skip(*, fn: Any, compile: dict[str, Any], **_: Any) -> bool:
        data = compile.get("specialization_data")
        if isinstance(data, str) and data not in into:
            into[data] = {"name": str(fn.name), "jit": fn.jit_function, "signature": compile["signature"],
                          "constants": compile["constants"], "attrs": (compile.get("configs") or [{}])[0],
                          "target": target}
        return True  # Triton then returns before compiling or launching

    before = knobs.runtime.jit_cache_hook
    knobs.runtime.jit_cache_hook = skip
    try:
        yield
    finally:
        knobs.runtime.jit_cache_hook = before


def record(call: Callable[[Any], None], cases: Iterable[Any],
           lock: str | None) -> tuple[list[dict[str, Any]], list[str]]:
    """(specialisations, errors): `call(case)` for each case with every Triton launch skipped and noted."""
    import torch

    specs: dict[str, dict[str, Any]] = {}
    failed: list[str] = []
    with _skipping(specs):
        for case in cases:
            try:
                with gpu_lock(lock):  # the host code's own torch calls still run on the GPU
                    call(case)
                    torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - outputs no kernel wrote may upset host code
                failed.append(f"{getattr(case, 'id', case)}: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}")
    return [dict(v, data=k) for k, v in specs.items()], failed


def _compile_one(spec: dict[str, Any]) -> None:
    """triton.compile of one recorded specialisation, with the options and target as Triton's preload
    rebuilds them from the same description (so the disk cache key is the launch's)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    desc = json.loads(spec["data"])
    target = GPUTarget(**desc["target"]) if "target" in desc else spec["target"]
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in desc["options"].items()}
    options = make_backend(target).parse_options(options)
    source = getattr(spec["jit"], "ASTSource", ASTSource)  # Gluon's functions bring their own
    triton.compile(source(spec["jit"], spec["signature"], spec["constants"], spec["attrs"]), target=target,
                   options=options.__dict__)


def _child(part: list[dict[str, Any]], out: int, parent: int) -> None:
    from aka.evaluate.lifeline import arm_death_signal

    arm_death_signal(parent)
    compiled, failed = 0, []
    for spec in part:
        try:
            _compile_one(spec)
            compiled += 1
        except Exception as exc:  # noqa: BLE001 - the launch compiles it again and says why
            failed.append(f"{spec['name']}: {type(exc).__name__}: {' '.join(str(exc).split())[-200:]}")
    os.write(out, json.dumps(ChildCompiled(compiled=compiled, failed=failed[:2]).model_dump()).encode())


def compile_forked(specs: list[dict[str, Any]], n: int) -> dict[str, int | list[str]]:
    """specs compiled by n forked children side by side: {"compiled", "workers", "failed" (when any)}, the
    fields of Precompiled they set."""
    parent, kids = os.getpid(), []
    for part in shares(specs, n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compile, write one JSON line, leave without running the parent's exit handlers
            code = 0
            try:
                os.close(r)
                _child(part, w, parent)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        kids.append((pid, r))
    compiled, failed = 0, []
    for pid, r in kids:
        with os.fdopen(r, "rb") as f:
            raw = f.read()
        os.waitpid(pid, 0)
        try:
            got = ChildCompiled.model_validate(json.loads(raw))  # pydantic's ValidationError is a ValueError
            compiled += got.compiled
            failed += got.failed
        except (ValueError, KeyError, TypeError):
            failed.append(f"compile child {pid} ended without a result")
    return {"compiled": compiled, "workers": len(kids), **({"failed": failed[:2]} if failed else {})}


def shares(specs: list[dict[str, Any]], n: int) -> list[list[dict[str, Any]]]:
    """specs dealt to n workers in kernel-name order, so each gets a mix of every kernel's (a kernel's
    specialisations cost alike), none empty."""
    ordered = sorted(specs, key=lambda s: (s["name"], s["data"]))
    return [part for part in (ordered[i::max(1, n)] for i in range(max(1, n))) if part]


def ahead(call: Callable[[Any], None], cases: list[Any], n: int, lock: str | None) -> Precompiled:
    """Record then compile (steps 1 and 2 above); the compile call's `precompile` detail. `tainted`: a
    case raised while recorded, so this process's CUDA state is not to be trusted."""
    t0 = time.perf_counter()
    specs, failed = record(call, cases, lock)
    out = Precompiled(specs=len(specs), record_s=round(time.perf_counter() - t0, 3))
    if failed:
        return out.model_copy(update={"tainted": failed[:2]})
    forked = compile_forked(specs, n) if specs else {}
    return out.model_copy(update={**forked, "seconds": round(time.perf_counter() - t0, 3)})
