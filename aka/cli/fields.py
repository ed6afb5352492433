"""Command-line options read from the typed settings: the default and the help of `--min-gain` are
PromotionRules.min_gain's, stated once there (mini-swe-agent's config-with-docstrings is the model)."""

from __future__ import annotations

from typing import Any

import typer
from pydantic import BaseModel


def default_of(model: type[BaseModel], name: str) -> Any:
    """The field's default as the model states it."""
    field = model.model_fields[name]
    return field.default_factory() if field.default_factory is not None else field.default


def option(model: type[BaseModel], name: str, *flags: str, help_extra: str = "", **kw: Any) -> Any:
    """A typer.Option for one settings field: its default, and its description as the help."""
    text = (model.model_fields[name].description or "") + help_extra
    return typer.Option(default_of(model, name), *flags, help=text, **kw)
