"""CUDA candidates on a machine without a GPU: find the CUDA source and compile it with nvcc only.

A CUDA candidate is a Python module that keeps its CUDA C++ in a module-level string literal
CUDA_SRC and builds it with torch.utils.cpp_extension.load_inline. Without a GPU, importing it
cannot work, but `nvcc -arch=sm_90a -c` of CUDA_SRC still finds compile errors for the repair
loop. Such a candidate is never gated here, so it can never be promoted here.

Cost measured on this 2-core CI box: CUDA_SRC including <torch/extension.h> takes 1.5 min of CPU
(4 min wall under load) to compile; one including only <cuda_runtime.h> takes ~1 s.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ARCH = "sm_90a"


def is_cuda_candidate(source: str) -> bool:
    """True when the module calls cpp_extension's load_inline (by any import form)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "load_inline":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "load_inline":
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("cpp_extension"):
            return True
    return False


def cuda_source(source: str) -> str:
    """The module-level CUDA_SRC string literal; ValueError with the fix when there is none."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CUDA_SRC" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                break
            if isinstance(value, str):
                return value
    raise ValueError("a CUDA candidate must keep its CUDA C++ in a module-level string literal CUDA_SRC")


def _includes() -> list[str]:
    from torch.utils.cpp_extension import include_paths

    return [f"-I{p}" for p in [*include_paths(), sysconfig.get_paths()["include"]]]


def nvcc_compile(source: str, timeout_s: float = 600.0, arch: str = ARCH) -> tuple[bool, str]:
    """(ok, error text) of `nvcc -arch=<arch> -c` on the candidate's CUDA_SRC (errors only, no warnings)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return False, "nvcc not found on PATH: a CUDA candidate cannot be compiled on this machine"
    try:
        cuda = cuda_source(source)
    except (ValueError, SyntaxError) as exc:
        return False, str(exc)
    with tempfile.TemporaryDirectory(prefix=f"aka-nvcc-{os.getpid()}-") as tmp:
        src = Path(tmp) / "candidate.cu"
        src.write_text(cuda)
        cmd = [nvcc, f"-arch={arch}", "-c", str(src), "-o", str(Path(tmp) / "candidate.o"), "-std=c++17", "-w",
               "-O0", *_includes()]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            return False, f"nvcc did not finish within {timeout_s:g} s"
    if out.returncode == 0:
        return True, ""
    text = (out.stderr + out.stdout).replace(str(src), "candidate.cu")
    errors = [ln for ln in text.splitlines() if "error" in ln.lower() or ln.startswith(" ")]
    return False, "\n".join(errors or text.splitlines())[-3000:]


if __name__ == "__main__":  # python -m aka.evaluate.static.cudacheck candidate.py
    ok, err = nvcc_compile(Path(sys.argv[1]).read_text())
    print("ok" if ok else err)
