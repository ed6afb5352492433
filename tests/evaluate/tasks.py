"""Worker tasks for the runner's own tests (trusted code: they bypass the candidate policy)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def echo(payload: dict) -> dict:
    print("noise on stdout that must not reach the result")
    return {"echo": payload, "pid": os.getpid(), "pgid": os.getpgid(0)}


def env(payload: dict) -> dict:
    return dict(os.environ)


def interpreter(payload: dict) -> dict:
    from aka.evaluate.host.interp import bf16_dot_shim_works, interpreter_requested

    ok, err = bf16_dot_shim_works() if interpreter_requested() else (False, -1.0)
    return {"interpret": interpreter_requested(), "shim_ok": ok, "err": err}


def fail(payload: dict) -> None:
    raise ValueError("bad value\nsecond line")


def hang(payload: dict) -> None:
    # A grandchild in the same process group: the timeout must take it down too.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(payload["pidfile"], "w") as f:
        f.write(str(child.pid))
    while True:
        time.sleep(1)


def segfault(payload: dict) -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def exit_quietly(payload: dict) -> None:
    os._exit(3)


def oom(payload: dict) -> None:
    raise MemoryError()


def not_json(payload: dict) -> object:
    return object()


def bf16_dot_unshimmed(payload: dict) -> dict:
    """A 32x32 bf16 tl.dot in the interpreter with no shim installed: the error it makes."""
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r[:, None] * N + r[None, :])
        b = tl.load(b_ptr + r[:, None] * N + r[None, :])
        tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(32, 32, generator=gen).to(torch.bfloat16)
    b = torch.randn(32, 32, generator=gen).to(torch.bfloat16)
    c = torch.empty(32, 32)
    _dot[(1,)](a, b, c, N=32)
    return {"err": (c - a.float() @ b.float()).abs().max().item()}


def spoofed_stage(payload: dict) -> None:
    err = RuntimeError("pretends to be something else")
    err.stage = "not-a-stage"
    raise err


def forked_compile(payload: dict) -> dict:
    """aka.evaluate.precompile's forked compiles on this machine: the toy kernel's two specialisations for
    sm_90 (Triton needs no GPU to compile for one), as a record would describe them, into a fresh cache."""
    import json
    from pathlib import Path

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    from aka.contract.ops import load_module
    from aka.evaluate.precompile import compile_forked
    from aka.evaluate.static.compstats import unwrap_jit

    triton.knobs.cache.dir = payload["cache"]
    jit = unwrap_jit(load_module(Path(payload["path"]))._kernel)
    target = {"backend": "cuda", "arch": 90, "warp_size": 32}
    options = make_backend(GPUTarget(**target)).parse_options({}).__dict__
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "o_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    specs = [{"name": "_kernel", "jit": jit, "signature": sig, "constants": {"BLOCK": b}, "attrs": {},
              "data": json.dumps({"target": target, "options": options, "block": b})} for b in (128, 256)]
    specs[1].update(target=GPUTarget(**target), data=json.dumps({"options": options, "block": 256}))  # Triton 3.6
    specs.append({**specs[0], "data": "not json", "name": "broken"})
    return {**compile_forked(specs, 2), "cubins": len(list(Path(payload["cache"]).rglob("*.cubin")))}
