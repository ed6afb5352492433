"""Which code paths a set of shapes takes, found without running a kernel.

A path is one Triton kernel with one compile-time specialisation: ``_seg_kernel(HAS_H0=True,
HV=2^n, ...)``, its name and every ``tl.constexpr`` argument's value (integers by class:
:func:`value_class`; launch options such as num_warps left out). That is what the host plan decides
from shapes and CONFIG (context parallelism or not, split or not, packed GQA or not, a head group of
1, a power of two or another size): two calls with the same paths take the same compile-time
branches. A *dry* call records the launches a kernel's host code makes, without executing one, on inputs of the meta
device, so the full set's paths cost about 2 s on a CPU.

What paths do not show: branches a kernel takes inside one compiled program on run-time values (a
warm-up decided per segment from the gates, how many splits hold keys, how many segments a chain
has). Those are the named edge cases' and the input variants' job (docs/gate.md).

Used by ``aka check`` (which full-set paths the checked sets do not reach: computed in the
candidate's own process, :func:`host_coverage`) and by the CI test that fails when the small sets stop
reaching a path of the full set, for the shipped kernels (tests/evaluate/test_coverage.py).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import Any

from aka.evaluate.wire import CoverageAnswer, CoveragePayload

_LOCK = threading.RLock()


def _constexprs(fn) -> list[tuple[str, Any]]:
    """(name, default) of the kernel's tl.constexpr parameters, in order."""
    py = getattr(fn, "fn", fn)
    out = []
    for p in inspect.signature(py).parameters.values():
        if "constexpr" in str(p.annotation):
            out.append((p.name, None if p.default is inspect.Parameter.empty else p.default))
    return out


def value_class(value: Any) -> str:
    """What coverage compares of a constexpr's value: flags, strings and None as they are; an integer by
    class (0, 1, a power of two, another number), since head counts and sizes compile to the same code
    whatever their value, where 1 and a number that is not a power of two take other branches (a GQA
    group of 1 or 3, a tile that does not divide). Pure."""
    if isinstance(value, bool) or not isinstance(value, int):
        return repr(value)
    if value in (0, 1):
        return str(value)
    return "2^n" if value > 0 and value & (value - 1) == 0 else "n"


Path = tuple[str, tuple[tuple[str, str], ...]]  # (kernel name, ((constexpr, value class), ...))


def path_of(kernel, args: tuple, kwargs: dict[str, Any]) -> Path:
    """The kernel and the value classes of its constexprs in this launch. Pure."""
    bound = dict(zip(getattr(kernel, "arg_names", []), args))
    bound.update(kwargs)
    fn = getattr(kernel, "fn", kernel)
    return (getattr(fn, "__name__", type(kernel).__name__),
            tuple((name, value_class(bound.get(name, default))) for name, default in _constexprs(kernel)))


@contextmanager
def dry_launches():
    """Within: every Triton launch (JIT or interpreter) is recorded into the yielded list and not run."""
    from triton.runtime import jit

    classes = [jit.JITFunction]
    try:
        from triton.runtime import interpreter

        classes.append(interpreter.InterpretedFunction)
    except ImportError:  # pragma: no cover - a Triton without the interpreter
        pass
    seen: list[Path] = []

    def dry(self, *args, grid=None, warmup=False, **kwargs):
        if not warmup:
            seen.append(path_of(self, args, kwargs))
        return None

    with _LOCK:
        saved = [(cls, cls.__dict__["run"]) for cls in classes if "run" in cls.__dict__]
        try:
            for cls, _ in saved:
                cls.run = dry
            yield seen
        finally:
            for cls, original in saved:
                cls.run = original


@contextmanager
def _meta_inputs():
    """Within: the input makers' random draws and generators work on torch's "meta" device, whose
    tensors have shapes, dtypes and strides but no memory: a dry call reads no value, and drawing the
    full set's paged caches for real (2 GB of keys for one fa4_decode shape) took 115 s of the 120 s
    an op's full set cost on 2 cores."""
    import torch

    real = {n: getattr(torch, n) for n in ("Generator", "randn", "rand", "randint", "randperm", "normal")}

    class generator(real["Generator"]):  # a type still, so torch's annotations that name it stay valid
        def __new__(cls, device="cpu"):
            return real["Generator"]("cpu")

    def drop_generator(name):
        def call(*a, generator=None, **kw):
            return real[name](*a, **kw)
        return call

    torch.Generator = generator
    for n in ("randn", "rand", "randint", "randperm", "normal"):
        setattr(torch, n, drop_generator(n))
    try:
        yield
    finally:
        for n, f in real.items():
            setattr(torch, n, f)


def case_paths(op, fn: Callable, case) -> set[Path]:
    """The paths one shape takes: a dry call of ``fn`` on the shape's inputs made on the meta device,
    with the contract's knobs the case sets passed to it."""
    with _LOCK:
        with _meta_inputs():
            inputs = op.inputs.make_inputs(case, 0, "meta")
        with dry_launches() as seen:
            fn(**inputs, **case.knobs)
    return set(seen)


def set_paths(op, fn: Callable, cases: Iterable) -> dict[str, set[Path]]:
    """Shape id -> its paths."""
    return {case.id: case_paths(op, fn, case) for case in cases}


def facets(path: Path) -> set[str]:
    """'name' and 'name: A=2^n' for each constexpr of a path: what coverage compares. Pure."""
    name, values = path
    return {name} | {f"{name}: {k}={v}" for k, v in values}


def uncovered(target: dict[str, set[Path]], reached: dict[str, set[Path]]) -> dict[str, list[str]]:
    """What ``target``'s shapes compile that no shape of ``reached`` does -> the target shapes that need
    it: each kernel, and each of its constexpr values (a kernel specialised for 64 heads, for an
    initial state, for packed rows). Value by value, not whole specialisations: the product of head
    counts, sequence-count classes and flags would need every full shape again. Pure."""
    have = set().union(*(f for ps in reached.values() for f in map(facets, ps))) if reached else set()
    out: dict[str, list[str]] = {}
    for sid, paths in target.items():
        need = set().union(*map(facets, paths)) if paths else set()
        for f in sorted(need - have):
            out.setdefault(f, []).append(sid)
    return out


def coverage_lines(missing: dict[str, list[str]], n_full: int, width: int = 100) -> list[str]:
    """What ``aka check`` prints. Pure."""
    if not missing:
        return [f"coverage: the checked shapes compile every kernel and specialisation of the full set's "
                f"{n_full} shapes"]
    lines = [f"coverage: {len(missing)} kernel(s) or specialisation(s) of the full set that the checked shapes "
             "never compile:"]
    for p, ids in sorted(missing.items()):
        text = f"  {p}  (full: {', '.join(ids)})"
        lines.append(text if len(text) <= width else text[:width - 1] + "…")
    return lines


def host_coverage(payload: CoveragePayload) -> CoverageAnswer:
    """Task run in the candidate's process (aka.evaluate.host.main ``task``) after the gate: which kernels and
    specialisations of the full set the checked shapes never compile, for the module the gate loaded.
    Informational (``aka check`` prints it), never a verdict: the candidate's process could lie."""
    from pathlib import Path

    from aka.contract.ops import get_op
    from aka.evaluate.host import loader

    op = get_op(payload.op, Path(payload.root))
    module = loader.module_of(payload.kernel)
    fn = getattr(module, op.spec.entry)
    full = set_paths(op, fn, op.cases("full"))
    checked = set_paths(op, fn, op.cases(",".join(payload.ids)))
    return CoverageAnswer(missing=uncovered(full, checked), n_full=len(full))
