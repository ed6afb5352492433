"""What the fa4 device probes take from the op's contract: a case by id, its inputs, a kernel module.

The shapes are workloads/fa4_*.yaml's, the inputs kernels/fa4_*/inputs.py's, the kernels the contract's
baseline.py / promoted.py, each imported by path as aka does (aka.contract.ops.load_module).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def one_case(op, sid: str):
    """The contract's case ``sid``, an id of any of its sets (full, smoke, edge)."""
    cases = op.cases(sid)
    if len(cases) != 1:
        sys.exit(f"{op.name}: expected one case id, got {sid!r}")
    return cases[0]


def inputs(op, sid: str, seed: int = 0, device: str = "cuda") -> dict:
    """The contract's inputs of case ``sid``."""
    return op.inputs.make_inputs(one_case(op, sid), seed, device)


def kernel_module(op, impl: str = "baseline"):
    """The contract's baseline or promoted kernel of ``op`` (promoted: promoted.py, or baseline.py with
    promoted.json's CONFIG values), imported by path."""
    from aka.contract.ops import load_module

    if impl not in ("baseline", "promoted"):
        sys.exit(f"{op.name}: a kernel is baseline or promoted, not {impl!r}")
    path = op.promoted_kernel() if impl == "promoted" else op.path(impl)
    if path is None:
        sys.exit(f"{op.name}: nothing is promoted")
    return load_module(path)
