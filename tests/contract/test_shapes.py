"""aka.contract.shapes: the one rule for what is gated, and the set type every caller uses."""

from aka.contract.ops import get_op, op_names
from aka.contract.shapes import ALL_SETS, ShapeSet, every_case, gated_sets, gated_stages
from aka.contract.spec import SHAPE_SETS


def test_the_full_set_is_gated_on_a_gpu_only_and_last():
    assert gated_stages(gpu=True) == [[ShapeSet.SMOKE, ShapeSet.EDGE], [ShapeSet.FULL]]
    assert gated_stages(gpu=False) == [[ShapeSet.SMOKE, ShapeSet.EDGE]]
    assert gated_sets(gpu=True) == ["smoke", "edge", "full"]  # a ShapeSet is the set's name


def test_the_contracts_define_exactly_the_typed_sets():
    assert set(SHAPE_SETS) == {s.value for s in ALL_SETS}
    for name in op_names():
        op = get_op(name)
        assert set(op.contract.sets) == set(SHAPE_SETS)
        assert op.cases(ShapeSet.FULL) == op.cases("full")
        cases = every_case(op)
        assert set(cases) == {c.id for s in SHAPE_SETS for c in op.cases(s)}
