"""The three contracts load, hold exactly OPS.md's shape sets, and malformed files fail in one line."""

from pathlib import Path

import pytest
import yaml

from aka.contract.ops import get_op, op_names, project_root
from aka.contract.spec import expand_lengths, load_contract
from aka.errors import ContractError, ShapeSetError, UnknownOpError

ROOT = project_root()


def test_ops_are_the_workload_files():
    # an op is added by its files alone: the list comes from workloads/, and OPS.md's three are in it
    assert op_names() == sorted(p.stem for p in (ROOT / "workloads").glob("*.yaml"))
    assert {"fa4_decode", "fa4_prefill", "gdn_prefill"} <= set(op_names())


@pytest.mark.parametrize("op,count,first,last", [
    ("gdn_prefill", 10, "G1", "G10"), ("fa4_prefill", 30, "P1", "P30"), ("fa4_decode", 20, "D1-q1", "D10-q4")])
def test_full_sets_match_ops_md(op, count, first, last):
    cases = get_op(op).cases("full")
    assert len(cases) == count
    assert (cases[0].id, cases[-1].id) == (first, last)
    assert len({c.id for c in cases}) == count


def test_gdn_full_set_values():
    c = {c.id: c for c in get_op("gdn_prefill").cases("full")}
    assert (c["G1"].hk, c["G1"].hv, c["G1"].seqlens) == (16, 32, [8192])
    assert c["G5"].seqlens == [2048] * 4
    assert c["G6"].seqlens == [1024, 7168]
    assert c["G7"].seqlens == [1024] * 8 and c["G7"].initial_state
    assert (c["G8"].hv, c["G9"].hv, c["G10"].hk, c["G10"].hv) == (64, 48, 4, 16)


def test_decode_full_set_values():
    c = {c.id: c for c in get_op("fa4_decode").cases("full")}
    assert c["D5-q4"].kv_lens == [32768] * 64 and c["D5-q4"].q_len == 4
    assert len(c["D6-q1"].kv_lens) == 32 and all(1024 <= x <= 32768 for x in c["D6-q1"].kv_lens)
    assert c["D6-q1"].kv_lens == c["D6-q4"].kv_lens
    assert (c["D9-q1"].hkv, c["D10-q1"].hq) == (2, 8)


def test_prefill_full_set_values():
    c = {c.id: c for c in get_op("fa4_prefill").cases("full")}
    assert c["P8"].q_lens == [32768]
    assert c["P14"].q_lens == [4096] * 8
    assert (c["P19"].q_lens, c["P19"].prefix) == ([8192], [24576])
    assert c["P22"].q_lens == [1, 63, 64, 65, 127, 128, 129, 4097]
    assert sum(c["P23"].q_lens) == 16384 and len(c["P23"].q_lens) == 16
    assert [(c[f"P{i}"].hq, c[f"P{i}"].hkv) for i in range(26, 31)] == [(16, 2), (8, 1), (32, 2), (24, 4), (16, 4)]


def test_cost_models_match_published_figures():
    g, p, d = get_op("gdn_prefill"), get_op("fa4_prefill"), get_op("fa4_decode")
    assert g.flops(g.cases("G1")[0]) == pytest.approx(47.2e9, rel=0.01)
    assert p.flops(p.cases("P5")[0]) == pytest.approx(146.2e9, rel=0.01)
    assert p.min_bytes(p.cases("P5")[0]) == pytest.approx(73.5e6, rel=0.01)
    assert d.model.kv_bytes(d.cases("D5-q1")[0]) == pytest.approx(2.147e9, rel=0.01)


def test_shape_selection_by_ids_and_errors():
    op = get_op("gdn_prefill")
    assert [c.id for c in op.cases("G3,E1")] == ["G3", "E1"]
    with pytest.raises(ShapeSetError, match="unknown shape set or id"):
        op.cases("G99")
    with pytest.raises(UnknownOpError, match="known ops: fa4_decode, fa4_prefill, gdn_prefill"):
        get_op("gdn_decode")


def test_expand_lengths():
    assert expand_lengths([1024, "3x5"]) == [1024, 5, 5, 5]
    with pytest.raises(ValueError):
        expand_lengths(["4 by 5"])


def _broken(tmp_path: Path, edit) -> Path:
    raw = yaml.safe_load((ROOT / "workloads" / "gdn_prefill.yaml").read_text())
    edit(raw)
    path = tmp_path / "gdn_prefill.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("edit,field,expected", [
    (lambda r: r["interface"]["inputs"][0].update(dtype="bf16"), "interface.inputs.0.dtype", "Input should be"),
    (lambda r: r.pop("formula"), "formula", "Field required"),
    (lambda r: r["tolerances"]["o"].update(rel_l2=-1), "tolerances.o.rel_l2", "greater than 0"),
    (lambda r: r["shapes"].pop("edge"), "shapes", "expected exactly the sets"),
    (lambda r: r["shapes"]["full"][0].update(hk="many"), "shapes.full.0.hk", "valid integer"),
    (lambda r: r["shapes"]["full"][1].update(id="G1"), "shapes.full.1.id", "duplicate shape id"),
    (lambda r: r["shapes"]["smoke"][0].update(seqlens=["2 by 3"]), "shapes.smoke.0", "COUNTxLENGTH"),
    (lambda r: r["shapes"]["full"][0].update(hq=3), "shapes.full.0.hq", "Extra inputs"),
    (lambda r: r["tolerances"].pop("final_state"), "tolerances", "one entry per output"),
    (lambda r: r.update(rank_timing="replay"), "rank_timing", "'eager' or 'graph'"),
    (lambda r: r["shapes"]["edge"][0].update(knobs={"cp_seg": 1}), "shapes.edge.0.knobs", "unknown knob 'cp_seg'"),
])
def test_malformed_contract_names_file_and_field(tmp_path, edit, field, expected):
    path = _broken(tmp_path, edit)
    with pytest.raises(ContractError) as info:
        load_contract(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(str(path))
    assert f"field '{field}" in msg
    assert expected in msg


def test_invalid_yaml_is_one_line(tmp_path):
    path = tmp_path / "gdn_prefill.yaml"
    path.write_text("name: gdn_prefill\ninterface: [unclosed\n")
    with pytest.raises(ContractError) as info:
        load_contract(path)
    assert "not valid YAML" in str(info.value) and "\n" not in str(info.value)


def test_every_op_ranks_on_graph_replay_with_a_host_cost_target():
    """The kernel's GPU time is ranked, the host's cost per call is a figure of its own (issues 18, 36)."""
    for name in ("fa4_decode", "fa4_prefill", "gdn_prefill"):
        spec = get_op(name).spec
        assert spec.rank_timing == "graph" and spec.host_target_us is not None and spec.host_target_us > 0


def _layout(case, keys) -> tuple[int, ...]:
    return tuple(getattr(case, k) for k in keys)


@pytest.mark.parametrize("name", ["gdn_prefill", "fa4_prefill", "fa4_decode"])
def test_head_layouts_cover_the_full_set_and_the_edge_set_every_group(name):
    """The contract lists the head layouts the op supports; the full set's are among them, and the smoke
    and edge sets (the small shapes the interpreter runs in CI) hold a case of every listed group size:
    1, powers of two and not (a head mapping or packing wrong for groups of 3 or 7 passes 2 and 4)."""
    op = get_op(name)
    layouts = op.spec.head_layouts
    keys = list(layouts[0])
    listed = {tuple(lay[k] for k in keys) for lay in layouts}
    assert all(len(lay) == 2 and list(lay) == keys for lay in layouts)
    assert {_layout(c, keys) for c in op.cases("full")} <= listed
    groups = {max(a, b) // min(a, b) for a, b in listed}
    assert {1, 3, 7} <= groups and any(g & (g - 1) == 0 and g > 1 for g in groups)
    edge = {max(a, b) // min(a, b) for a, b in (_layout(c, keys) for c in op.cases("smoke") + op.cases("edge"))}
    assert groups <= edge, f"{name}: no smoke or edge case with group size {sorted(groups - edge)}"
