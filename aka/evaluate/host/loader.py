"""Implementations loaded and prepared in the candidate's process (the harness's side of
aka.evaluate.parent.impls, which names them in the parent).

Preparation (:func:`prepare`): a kernel module's entry is called with the inputs as keyword
arguments; a competitor factory gets the inputs, does its untimed preparation (layout conversion,
gathering pages to a dense layout) and returns a zero-argument callable, or raises ImportError /
RuntimeError whose message becomes the skip note. The returned callable may carry a ``note``
(which library path ran, what layout conversion happened) that is printed beside its numbers.
Nothing is ever dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from aka.contract.ops import load_module
from aka.evaluate.wire import ImplRef

_MODULES: dict[str, Any] = {}
_VARIANTS: dict[tuple[str, str], Any] = {}  # (path, CONFIG values as JSON) -> a module of its own


def adopt(path: str, module) -> None:
    """Use an already imported module for ``path`` (the gate's, in the candidate's process)."""
    _MODULES[str(Path(path).resolve())] = module


def module_of(path: str):
    """The module at ``path``: the one the gate adopted in this process, else imported once."""
    path = str(Path(path).resolve())
    if path not in _MODULES:  # load each file once per worker process
        _MODULES[path] = load_module(Path(path))
    return _MODULES[path]


def variant_of(path: str, config: dict[str, JsonValue]):
    """The module at ``path`` with ``config`` set in its CONFIG: a separate import, so the plain module
    (and the gate's adopted one) keeps its own values; a module without CONFIG cannot take them."""
    if not config:
        return module_of(path)
    key = (str(Path(path).resolve()), json.dumps(config, sort_keys=True))
    if key not in _VARIANTS:
        module = load_module(Path(key[0]), f"aka_variant_{len(_VARIANTS)}")
        if not isinstance(getattr(module, "CONFIG", None), dict):
            raise RuntimeError(f"{path} has no CONFIG dict to set {sorted(config)} in")
        module.CONFIG.update(config)
        _VARIANTS[key] = module
    return _VARIANTS[key]


def prepare(ref: ImplRef, inputs: dict[str, Any]) -> Callable[[], Any]:
    """A zero-argument callable running ``ref`` on ``inputs``; ImportError/RuntimeError mean 'skip'."""
    module = variant_of(ref.path, ref.config) if ref.kind == "kernel" else module_of(ref.path)
    fn = getattr(module, ref.function, None)
    if fn is None:
        raise RuntimeError(f"{ref.path} defines no function '{ref.function}'")
    if ref.kind == "kernel":
        if ref.graphed:  # the caller's wrapper: its graphs live as long as this prepared call
            from aka.graphed import GraphedOp

            fn = GraphedOp(fn)
            if ref.bound:
                return fn.bind(**inputs)
        return lambda: fn(**inputs)
    call = fn(inputs)
    if not callable(call):
        raise RuntimeError(f"{ref.path}:{ref.function} returned {type(call).__name__}, not a callable")
    return call


def note_of(call: Callable[[], Any]) -> str:
    """What a competitor says about its run (its callable's ``note``: dispatch path, layout, loops)."""
    return str(getattr(call, "note", "") or "")
