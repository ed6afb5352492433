"""Implementations the harness can time, by name: the op's baseline and promoted kernels, a kernel
file, and the contract's competitors (external libraries behind ``kernels/<op>/competitors.py``).
A kernel name may carry CONFIG values, ``baseline+BV=32+cp=false``: that kernel timed with those
values set, in a module of its own, beside the others (what the device scripts' variant screens did).
A kernel name ending in ``@graph`` (``baseline@graph``, ``baseline+cp=false@graph``, ``my.py@graph``) is
that kernel called through aka.graphed: its eager time is what a caller that keeps its buffers in place
pays a call (one graph launch); its graph time is the kernel's own. ``@bound`` is the same with the
arguments bound once (``GraphedOp.bind``): what a caller that passes the very same buffers every call pays.

Resolution (:func:`resolve`) runs in the parent and imports nothing it times: each name becomes an
aka.evaluate.wire.ImplRef, which travels to the candidate's process; loading and preparing it there is
aka.evaluate.host.loader's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, JsonValue

from aka.contract.module_config import config_of
from aka.contract.ops import Op
from aka.errors import AkaError
from aka.evaluate.wire import ImplRef


class ImplError(AkaError):
    """An implementation name that is neither a kernel, a file nor a competitor of the op."""


class Skipped(BaseModel):
    """An implementation that will not be timed, and why."""

    name: str
    note: str


def _kernel(name: str, path: Path, op: Op, overrides: list[str] = ()) -> ImplRef:
    return ImplRef(name=name, kind="kernel", path=str(path.resolve()), function=op.spec.entry,
                   config=config_values(path, overrides))


def config_values(path: Path, overrides: list[str]) -> dict[str, JsonValue]:
    """``KEY=VALUE`` strings as CONFIG values of the module at ``path``, each parsed as the type of the
    value it replaces (true/false for a bool)."""
    if not overrides:
        return {}
    config = config_of(path.read_text())
    if config is None:
        raise ImplError(f"{path}: has no literal CONFIG dict, so '+{overrides[0]}' has nothing to set")
    out: dict[str, JsonValue] = {}
    for item in overrides:
        key, eq, text = item.partition("=")
        if not eq or key not in config:
            what = f"no CONFIG key '{key}'" if eq else f"'{item}' is not KEY=VALUE"
            raise ImplError(f"{path.name}: {what}; its keys: {', '.join(sorted(config))}")
        out[key] = _parse_as(config[key], text, f"{path.name}: {key}={text}")
    return out


def _parse_as(current: Any, text: str, where: str) -> JsonValue:
    """``text`` as the type of ``current``; ``where`` ('file: KEY=VALUE') names it in the error."""
    if isinstance(current, bool):
        if text.lower() not in ("true", "false"):
            raise ImplError(f"{where}: the current value is {current}; write true or false")
        return text.lower() == "true"
    for kind in (int, float):
        if isinstance(current, kind):
            try:
                return kind(text)
            except ValueError:
                raise ImplError(f"{where}: the current value {current!r} is a {kind.__name__}") from None
    if current is None or isinstance(current, str):
        return text
    raise ImplError(f"{where}: the current value {current!r} is a {type(current).__name__}; only numbers, "
                    "booleans and strings can be set from the command line")


def _competitor(name: str, target: str, op: Op) -> ImplRef:
    path, _, func = target.partition(":")
    if not func:
        raise ImplError(f"{op.name}: competitor '{name}' is '{target}'; write it as 'path/to/module.py:function'")
    return ImplRef(name=name, kind="competitor", path=str((op.root / path).resolve()), function=func)


_GRAPHED, _BOUND = "@graph", "@bound"  # the name's suffixes for a kernel called through aka.graphed


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
    for full in names:
        at = next((x for x in (_GRAPHED, _BOUND) if full.endswith(x)), "")  # "" when called as it is
        raw, *overrides = full.removesuffix(at).split("+")
        label = _unique(full, taken)
        start = len(refs)
        if raw == "baseline":
            refs.append(_kernel(label, op.path("baseline"), op, overrides))
        elif raw == "promoted":
            path = op.promoted_kernel()
            if path is not None:
                refs.append(_kernel(label, path, op, overrides))
            else:
                skipped.append(Skipped(name=label, note=f"no promoted kernel yet ({op.spec.modules.promoted})"))
        elif raw == "kernel":
            if kernel is None:
                raise ImplError("--impl names 'kernel' but no --kernel FILE was given")
            name = "+".join([kernel.stem, *overrides]) + at
            refs.append(_kernel(_unique(name, taken), checked_kernel(kernel, op), op, overrides))
        elif raw in op.spec.competitors:
            if overrides:
                raise ImplError(f"{full}: CONFIG values apply to aka's kernels, not to the competitor '{raw}'")
            refs.append(_competitor(label, op.spec.competitors[raw], op))
        elif raw.endswith(".py"):
            name = "+".join([Path(raw).stem, *overrides]) + at
            refs.append(_kernel(_unique(name, taken), checked_kernel(Path(raw), op), op, overrides))
        else:
            known = ["baseline", "promoted", *op.spec.competitors]
            raise ImplError(f"{op.name}: unknown implementation '{raw}'; use one of {', '.join(known)} or a .py file, "
                            f"a kernel optionally ending in '{_GRAPHED}' or '{_BOUND}'")
        if at and len(refs) > start:
            if refs[-1].kind != "kernel":
                raise ImplError(f"{full}: '{at}' wraps aka's kernels, not the competitor '{raw}'")
            refs[-1] = refs[-1].model_copy(update={"graphed": True, "bound": at == _BOUND})
    return refs, skipped


def checked_kernel(path: Path, op: Op) -> Path:
    """A candidate file that exists and passes the static policy (aka.evaluate.static.policy)."""
    from aka.evaluate.static.policy import check_source

    if not path.is_file():
        raise ImplError(f"{path}: no such kernel file; pass an existing .py file to --kernel")
    result = check_source(path.read_text(), op.spec)
    if not result.ok:
        raise ImplError(f"{path}: refused by the policy check: {result.message}")
    return path
