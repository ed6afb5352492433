"""Implementations the harness can time, by name: the op's baseline and promoted kernels, a kernel
file, and the contract's competitors (external libraries behind ``kernels/<op>/competitors.py``).

Resolution (:func:`resolve`) runs in the parent and imports nothing it times. Preparation
(:func:`prepare`) runs in the worker: a kernel module's entry is called with the inputs as keyword
arguments; a competitor factory gets the inputs, does its untimed preparation (layout conversion,
gathering pages to a dense layout) and returns a zero-argument callable, or raises ImportError /
RuntimeError whose message becomes the skip note. The returned callable may carry a ``note``
(which library path ran, what layout conversion happened) that is printed beside its numbers.
Nothing is ever dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from aka.contract.ops import Op, load_module
from aka.errors import AkaError


class ImplError(AkaError):
    """An implementation name that is neither a kernel, a file nor a competitor of the op."""


class ImplRef(BaseModel):
    """Where one implementation lives; JSON-able so it can travel to the worker."""

    name: str = Field(description="label in tables, unique within one run")
    kind: Literal["kernel", "competitor"]
    path: str = Field(description="absolute path of the module")
    function: str = Field(description="kernel entry, or competitor factory(inputs) -> callable")


class Skipped(BaseModel):
    """An implementation that will not be timed, and why."""

    name: str
    note: str


def _kernel(name: str, path: Path, op: Op) -> ImplRef:
    return ImplRef(name=name, kind="kernel", path=str(path.resolve()), function=op.spec.entry)


def _competitor(name: str, target: str, op: Op) -> ImplRef:
    path, _, func = target.partition(":")
    if not func:
        raise ImplError(f"{op.name}: competitor '{name}' is '{target}'; write it as 'path/to/module.py:function'")
    return ImplRef(name=name, kind="competitor", path=str((op.root / path).resolve()), function=func)


def _unique(name: str, taken: set[str]) -> str:
    label, i = name, 2
    while label in taken:
        label, i = f"{name}#{i}", i + 1
    taken.add(label)
    return label


def resolve(op: Op, names: list[str], kernel: Path | None = None) -> tuple[list[ImplRef], list[Skipped]]:
    """Map names (baseline, promoted, kernel, a competitor, or a .py path) to ImplRefs and skip notes.

    A --kernel file not named in ``names`` is appended; a repeated name gets a '#2' label (timing the
    same kernel twice in one run is the stability check).
    """
    if kernel is not None and "kernel" not in names:
        names = [*names, "kernel"]
    refs: list[ImplRef] = []
    skipped: list[Skipped] = []
    taken: set[str] = set()
    for raw in names:
        label = _unique(raw, taken)
        if raw == "baseline":
            refs.append(_kernel(label, op.path("baseline"), op))
        elif raw == "promoted":
            path = op.path("promoted")
            if path.is_file():
                refs.append(_kernel(label, path, op))
            else:
                skipped.append(Skipped(name=label, note=f"no promoted kernel yet ({op.spec.modules.promoted})"))
        elif raw == "kernel":
            if kernel is None:
                raise ImplError("--impl names 'kernel' but no --kernel FILE was given")
            refs.append(_kernel(_unique(kernel.stem, taken), checked_kernel(kernel, op), op))
        elif raw in op.spec.competitors:
            refs.append(_competitor(label, op.spec.competitors[raw], op))
        elif raw.endswith(".py"):
            refs.append(_kernel(_unique(Path(raw).stem, taken), checked_kernel(Path(raw), op), op))
        else:
            known = ["baseline", "promoted", *op.spec.competitors]
            raise ImplError(f"{op.name}: unknown implementation '{raw}'; use one of {', '.join(known)} or a .py file")
    return refs, skipped


def checked_kernel(path: Path, op: Op) -> Path:
    """A candidate file that exists and passes the static policy (aka.evaluate.policy)."""
    from aka.evaluate.policy import check_source

    if not path.is_file():
        raise ImplError(f"{path}: no such kernel file; pass an existing .py file to --kernel")
    result = check_source(path.read_text(), op.spec)
    if not result.ok:
        raise ImplError(f"{path}: refused by the policy check: {result.message}")
    return path


_MODULES: dict[str, Any] = {}


def adopt(path: str, module) -> None:
    """Use an already imported module for ``path`` (the gate's, in the candidate's process)."""
    _MODULES[str(Path(path).resolve())] = module


def module_of(path: str):
    """The module at ``path``: the one the gate adopted in this process, else imported once."""
    path = str(Path(path).resolve())
    if path not in _MODULES:  # load each file once per worker process
        _MODULES[path] = load_module(Path(path))
    return _MODULES[path]


def prepare(ref: ImplRef, inputs: dict[str, Any]) -> Callable[[], Any]:
    """A zero-argument callable running ``ref`` on ``inputs``; ImportError/RuntimeError mean 'skip'."""
    module = module_of(ref.path)
    fn = getattr(module, ref.function, None)
    if fn is None:
        raise RuntimeError(f"{ref.path} defines no function '{ref.function}'")
    if ref.kind == "kernel":
        return lambda: fn(**inputs)
    call = fn(inputs)
    if not callable(call):
        raise RuntimeError(f"{ref.path}:{ref.function} returned {type(call).__name__}, not a callable")
    return call


def note_of(call: Callable[[], Any]) -> str:
    """What a competitor says about its run (its callable's ``note``: dispatch path, layout, loops)."""
    return str(getattr(call, "note", "") or "")
