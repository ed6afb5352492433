"""The contract's shape sets as a type, and the one rule for which of them a kernel must pass.

Every contract has exactly the sets full, smoke and edge (aka.contract.spec checks it). Which are
gated, and in which stages, is decided here alone: the loop (aka.run.state), `aka check` with
--shapes auto (aka.evaluate.checker.gate) and `aka regress` (aka.report.regress) all ask gated_stages()
(or gated_sets(), the same flattened).
"""

from __future__ import annotations

from enum import Enum


class ShapeSet(str, Enum):
    """A shape set's name; a str, so it goes wherever a set name or id list is accepted."""

    FULL = "full"  # the real workload: timed, and gated on a GPU
    SMOKE = "smoke"  # small: the first gate; what the interpreter times
    EDGE = "edge"  # lengths 1, tails, ragged batches: gated everywhere

    def __str__(self) -> str:
        return self.value


ALL_SETS: tuple[ShapeSet, ...] = (ShapeSet.FULL, ShapeSet.SMOKE, ShapeSet.EDGE)


def gated_stages(gpu: bool) -> list[list[ShapeSet]]:
    """The sets a kernel must pass, in the order they are gated: the small sets first (cheap, they
    stop most wrong kernels), the full set (float64 references of long sequences) only on a GPU."""
    first = [ShapeSet.SMOKE, ShapeSet.EDGE]
    return [first, [ShapeSet.FULL]] if gpu else [first]


def gated_sets(gpu: bool) -> list[ShapeSet]:
    """gated_stages() flattened: every set a kernel must pass on this kind of device."""
    return [s for stage in gated_stages(gpu) for s in stage]


def every_case(op) -> dict:
    """Shape id -> case over all of the op's sets (a case may sit in several sets)."""
    return {c.id: c for s in ALL_SETS for c in op.cases(s)}
