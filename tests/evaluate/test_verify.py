"""The timing's own checks (aka.evaluate.checker.verify, aka.evaluate.host.rotation): pure rules and the inputs a
timed call saw."""

from __future__ import annotations

import pytest
import torch

from aka.contract.ops import get_op
from aka.evaluate.checker.verify import SUSPECT, below_floor, expected_samples, floor_problem, speed_of_light_us
from aka.evaluate.host.rotation import Rotation, rotated
from aka.evaluate.wire import VerifySettings


def test_below_floor_only_under_the_suspect_fraction():
    assert below_floor(100.0, 200.0, "eager median") == ""
    assert below_floor(SUSPECT * 200.0, 200.0, "x") == ""
    assert below_floor(10.0, 200.0, "eager median").startswith("suspect: eager median 10.00 µs is under 40%")
    assert below_floor(0.0, None, "x") == ""  # no page for the device: no floor


def test_speed_of_light_takes_the_larger_of_compute_and_memory():
    op = get_op("fa4_decode")
    case = op.cases("D5-q1")[0]
    floor = speed_of_light_us(op, case, (989.5, 4800.0))
    assert abs(floor - op.min_bytes(case) / 4.8e12 * 1e6) < 1e-6  # decode is memory-bound
    assert speed_of_light_us(op, case, None) is None


def test_expected_samples_wants_each_timing_of_each_sampled_kernel():
    v = VerifySettings()
    cell = {"eager": 1.0, "graph": 1.0}  # the cell's medians
    assert expected_samples(v, "candidate", "competitor", "S1", cell, None) == ""
    none = "no timed {} output came back to be checked"
    assert expected_samples(v, "candidate", "kernel", "S1", cell, None) == none.format("eager")
    found = {"problem": "", "timings": ["eager"]}
    assert expected_samples(v, "candidate", "kernel", "S1", cell, found) == none.format("graph")
    found = {"problem": "", "timings": ["eager", "graph"]}
    assert expected_samples(v, "candidate", "kernel", "S1", cell, found) == ""
    assert expected_samples(VerifySettings(impls=["x"]), "candidate", "kernel", "S1", cell, None) == ""
    assert expected_samples(VerifySettings(shapes=["S2"]), "candidate", "kernel", "S1", cell, None) == ""
    bad = {"problem": "timed output wrong (eager call 3): o: all zeros", "timings": ["eager", "graph"]}
    assert expected_samples(v, "candidate", "kernel", "S1", cell, bad) == bad["problem"]


def test_paged_refresh_changes_every_value_read_and_keeps_what_must_stay():
    op = get_op("fa4_decode")
    case = op.cases("S2")[0]
    base = op.inputs.make_inputs(case, 3, "cpu")
    new = rotated(op, case, 3, 11, "cpu", base)
    assert torch.equal(new["kv_lens"], base["kv_lens"])
    assert not torch.equal(new["q"], base["q"])
    assert new["k_cache"] is base["k_cache"]  # the pool is not rewritten (no GPU traffic before a timed call)
    # the full pages are permuted among the sequences, the partial last pages stay
    lens = base["kv_lens"].tolist()
    for n, L in enumerate(lens):
        full, need = L // 128, -(-L // 128)
        if need > full:
            assert new["page_table"][n, full] == base["page_table"][n, full]
    assert sorted(new["page_table"][base["page_table"] != new["page_table"]].tolist()) == sorted(
        base["page_table"][base["page_table"] != new["page_table"]].tolist())
    again = rotated(op, case, 3, 11, "cpu", op.inputs.make_inputs(case, 3, "cpu"))  # what the checker rebuilds
    assert all(torch.equal(again[k].view(torch.uint8) if again[k].is_floating_point() else again[k],
                           new[k].view(torch.uint8) if new[k].is_floating_point() else new[k]) for k in new)


def test_page_zero_and_everything_unowned_is_nan():
    op = get_op("fa4_prefill")
    case = op.cases("E4")[0]
    x = op.inputs.make_inputs(case, 0, "cpu")
    owned = set()
    for n, L in enumerate(x["kv_lens"].tolist()):
        owned |= set(x["page_table"][n, : -(-L // 64)].tolist())
        last = x["page_table"][n, (L - 1) // 64]
        assert torch.isnan(x["k_cache"][last, (L - 1) % 64 + 1:].float()).all()  # the tail of the last page
    assert 0 not in owned
    unowned = [p for p in range(x["k_cache"].shape[0]) if p not in owned]
    assert torch.isnan(x["v_cache"][unowned].float()).all()


def test_gdn_refresh_flips_row_signs_of_q_k_v_only():
    op = get_op("gdn_prefill")
    case = op.cases("S2")[0]
    base = op.inputs.make_inputs(case, 1, "cpu")
    new = rotated(op, case, 1, 5, "cpu", base)
    for name in ("q", "k", "v"):
        ratio = (new[name].float() / base[name].float()).nan_to_num(1.0)
        assert set(ratio.unique().tolist()) <= {-1.0, 1.0} and (ratio < 0).any() and (ratio > 0).any()
    for name in ("g", "beta", "cu_seqlens", "initial_state"):
        assert torch.equal(new[name], base[name])


def test_gdn_variants_decay_as_named():
    op = get_op("gdn_prefill")
    case = op.cases("S1")[0]
    qwen = op.inputs.make_inputs(case, 0, "cpu", variant="qwen")["g"]
    mixed = op.inputs.make_inputs(case, 0, "cpu", variant="mixed")["g"]
    weak = op.inputs.make_inputs(case, 0, "cpu", variant="weak")["g"]
    assert weak.max() <= 0 and weak.mean() > -0.01
    assert mixed[:, 1].mean() > -0.01 and torch.equal(mixed[:, 0], qwen[:, 0])
    assert qwen.mean() < -0.05


def test_gdn_regimes_real_models_produce():
    """Issue 37's regimes: keys in clusters (and repeated), gates that change speed inside a sequence,
    very fast gates beside weak ones."""
    op = get_op("gdn_prefill")
    case = op.cases("E4")[0]  # six sequences, 390 tokens, 4 value heads
    k = op.inputs.make_inputs(case, 0, "cpu", variant="correlated")["k"].float()[:, 0]
    cos = k @ k.T
    off = cos[~torch.eye(len(k), dtype=torch.bool)]
    assert (off > 0.5).float().mean() > 0.15 and (off > 0.999).any()  # clusters, and exact repeats
    plain = op.inputs.make_inputs(case, 0, "cpu", variant="qwen")["k"].float()[:, 0]
    assert ((plain @ plain.T)[~torch.eye(len(k), dtype=torch.bool)] > 0.5).float().mean() < 0.01
    g = op.inputs.make_inputs(case, 0, "cpu", variant="shifting")["g"]
    seq = g[90:390]  # the 300-token sequence: each head has fast and weak stretches
    assert all((seq[:, h] > -0.01).any() and (seq[:, h] < -0.01).any() for h in range(4))
    g = op.inputs.make_inputs(case, 0, "cpu", variant="fast")["g"]
    assert g[:64, 0].sum() < -90 and g[:, 1].mean() > -0.01


def test_each_shape_goes_on_through_the_variants_where_the_previous_stopped():
    from aka.evaluate.checker.gate import variant_of

    v = ["qwen", "mixed", "weak", "correlated", "shifting", "fast"]
    assert [variant_of(v, r, 0) for r in range(3)] == ["qwen", "mixed", "weak"]
    assert [variant_of(v, r, 1) for r in range(3)] == ["correlated", "shifting", "fast"]
    assert [variant_of(v[:3], r, 5) for r in range(3)] == ["qwen", "mixed", "weak"]  # 3 variants: r % 3
    assert variant_of([], 2, 1) == ""


def test_only_a_source_that_orders_its_programs_gets_repeats_on_a_gpu():
    from aka.evaluate.checker.gate import ORDER_REPEATS, order_repeats

    ticket = 'n = tl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")'
    assert order_repeats(ticket, "cuda") == ORDER_REPEATS > 0
    assert order_repeats(ticket, "cpu") == 0  # the interpreter runs programs one at a time
    assert order_repeats("tl.debug_barrier()\nx = tl.load(p)", "cuda") == 0
    assert order_repeats("__threadfence(); atomicAdd(c, 1);", "cuda") == ORDER_REPEATS


@pytest.mark.parametrize("op_name,shape", [("fa4_decode", "S2"), ("gdn_prefill", "S2"), ("fa4_prefill", "S2")])
def test_every_refreshed_buffer_is_what_the_checker_rebuilds(op_name, shape):
    """The harness's buffers (probe on another buffer included) equal rotated() from the recorded seeds."""
    from aka.evaluate.host.rotation import Rotation

    op = get_op(op_name)
    case = op.cases(shape)[0]
    seeds = [10, 11]
    copies = [op.inputs.make_inputs(case, s, "cpu") for s in seeds]
    rot = Rotation(op, case, copies, seeds, 3, "cpu", min_calls=4, sample={"k"})
    before, _ = rot.hooks("k", "eager")
    for i in range(8):
        before(i, i % 2)
        _, buf, base_seed, seed = rot.trace[-1]
        want = rotated(op, case, base_seed, seed, "cpu")
        for name, t in want.items():
            got = copies[buf][name]
            assert torch.equal(torch.nan_to_num(got.float(), 7.0), torch.nan_to_num(t.float(), 7.0)), (i, name)
    # with this seed the probe lands in buffer 1 but is built from buffer 0's base: the case that moves a base
    assert any(seeds.index(base_seed) != buf for _, buf, base_seed, _ in rot.trace)


def test_a_graph_only_cell_is_still_checked(monkeypatch):
    """The ABBA of an op ranked on graph replay times only replays: their outputs must come back, and
    their medians face the speed-of-light floor."""
    from aka.evaluate.checker import verify

    monkeypatch.setattr(verify, "datasheet_peaks", lambda: (989.0, 4800.0))  # an H200's, as on the device
    v = VerifySettings()
    cell = {"graph": 1.0}  # the cell's medians
    assert expected_samples(v, "b", "kernel", "S1", cell, None) == "no timed graph output came back to be checked"
    assert expected_samples(v, "b", "kernel", "S1", cell, {"problem": "", "timings": ["graph"]}) == ""
    op = get_op("fa4_decode")
    case = op.cases("D5-q1")[0]
    assert "graph replay median" in floor_problem(op, case, {"graph": 0.01}, "cuda")
    assert floor_problem(op, case, {"graph": 1e6}, "cuda") == ""
    assert floor_problem(op, case, {"graph": 0.01}, "cpu") == ""


def test_a_frozen_last_output_survives_a_later_call_that_rewrites_it(tmp_path):
    """NAME@graph returns its graph's buffers, which its next call rewrites (aka.graphed's terms): the harness
    freezes that kept last output before calling it again. A kernel's is not frozen: a buffer it hands out
    and rewrites later is checked as it stands at the end."""
    from aka.evaluate.exchange import get

    op = get_op("fa4_decode")
    case = op.cases("S1")[0]
    copies = [op.inputs.make_inputs(case, 10, "cpu")]
    shared = torch.zeros(3)  # what an implementation that reuses its output buffer returns every call
    rot = Rotation(op, case, copies, [10], 3, "cpu", min_calls=1, sample={"graphed", "kernel"}, last=True)
    for name in ("graphed", "kernel"):
        (call,) = rot.wrap(name, [lambda: shared.fill_(1.0)])
        before, after = rot.hooks(name, "eager")
        for i in range(3):
            before(i, 0)
            call()
            after(i, 0)
    rot.freeze("graphed")
    shared.fill_(2.0)  # a later call (peak memory, graph capture) rewrites the buffer
    samples = rot.finish(tmp_path, "t")
    last = {s.impl: s for s in samples if s.call == 2}
    assert get(last["graphed"].outputs[0], tmp_path).tolist() == [1.0] * 3
    assert get(last["kernel"].outputs[0], tmp_path).tolist() == [2.0] * 3
