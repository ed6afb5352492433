"""Coverage by construction: the small sets CI runs compile every kernel and specialisation the full set
does (aka.evaluate.host.coverage), for the baseline and the promoted kernel of every op; found by dry calls,
without running a kernel, so the full set costs seconds on a CPU."""

from __future__ import annotations

import pytest

from aka.contract.ops import get_op, load_module
from aka.evaluate.host.coverage import coverage_lines, facets, set_paths, uncovered, value_class

OPS = ["gdn_prefill", "fa4_decode", "fa4_prefill"]


def _paths(name: str, impl: str, sets: str):
    op = get_op(name)
    path = op.default_kernel() if impl == "promoted" else op.path(impl)  # the baseline where none is promoted
    module = load_module(path, f"aka_coverage_{name}_{impl}")
    cases = [c for s in sets.split(",") for c in op.cases(s)]
    return set_paths(op, getattr(module, op.spec.entry), cases)


@pytest.mark.parametrize("impl", ["baseline", "promoted"])
@pytest.mark.parametrize("name", OPS)
def test_the_edge_set_compiles_every_path_of_the_full_set(name, impl):
    full = _paths(name, impl, "full")
    small = _paths(name, impl, "smoke,edge")
    assert all(full.values()) and all(small.values()), "a dry call launched nothing"
    missing = uncovered(full, small)
    assert not missing, "\n".join(coverage_lines(missing, len(full), 200))


def test_removing_an_edge_case_that_holds_a_path_fails_coverage():
    """The test above can fail: without gdn_prefill's E8 (context parallelism over two key heads, group
    3) no small shape compiles the segment kernel for a head count that is not a power of two, which
    the full set's G9 (48 value heads) does."""
    op = get_op("gdn_prefill")
    module = load_module(op.default_kernel(), "aka_coverage_gdn_e8")
    fn = getattr(module, op.spec.entry)
    full = set_paths(op, fn, op.cases("full"))
    small = set_paths(op, fn, [c for c in op.cases("smoke") + op.cases("edge") if c.id != "E8"])
    missing = uncovered(full, small)
    assert "_seg_kernel: HV=n" in missing and missing["_seg_kernel: HV=n"] == ["G9"], missing


def test_paths_compare_flags_exactly_and_integers_by_class():
    assert [value_class(v) for v in (True, "tf32", None, 0, 1, 2, 64, 48, 7)] == [
        "True", "'tf32'", "None", "0", "1", "2^n", "2^n", "n", "n"]
    assert facets(("k", (("A", "2^n"), ("P", "'x'"), ("B", "True")))) == {"k", "k: A=2^n", "k: P='x'", "k: B=True"}
    full = {"G1": {("k", (("A", "2^n"), ("B", "True")))}, "G2": {("k", (("A", "n"), ("B", "True"))), ("m", ())}}
    small = {"E1": {("k", (("A", "2^n"), ("B", "False")))}, "E2": {("k", (("A", "n"), ("B", "False")))}}
    assert uncovered(full, small) == {"k: B=True": ["G1", "G2"], "m": ["G2"]}
    assert coverage_lines({}, 3)[0].startswith("coverage: the checked shapes compile every")
