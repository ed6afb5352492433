"""The Plan: what one round intends to try, and why. Produced by every backend (offline or LLM).

The offline backend fills it from its search; an LLM backend parses its answer into the same model,
so the attempts log and the display never care which backend planned. The model itself lives with
the other recorded types in aka.records (the attempts log stores it).
"""

from __future__ import annotations

from aka.records import Plan

__all__ = ["Plan"]
