"""The fla competitor adapter (kernels/gdn_prefill/competitors.py) against a stand-in fla module.

fla itself needs a GPU; what is tested here is the adapter's own logic: the grouped-value check runs
once per process (each head layout costs the real fla an autotune), and a disagreeing grouped call
makes every later shape use q/k repeated to the value heads.
"""

import importlib
import sys
import types

import pytest
import torch


@pytest.fixture
def fake_fla(monkeypatch):
    calls = []

    def chunk_gated_delta_rule(q, k, v, g, beta, *, initial_state, output_final_state, cu_seqlens, scale):
        calls.append((q.shape[2], v.shape[2]))
        group = v.shape[2] // q.shape[2]
        out = v.clone()
        if group > 1 and not state["grouped_ok"]:
            out = out * 2  # a grouped call that disagrees with the repeated one
        return out, torch.zeros(1)

    state = {"grouped_ok": True}
    pkgs = {n: types.ModuleType(n) for n in ("fla", "fla.ops", "fla.ops.gated_delta_rule")}
    pkgs["fla.ops.gated_delta_rule"].chunk_gated_delta_rule = chunk_gated_delta_rule
    for name, m in pkgs.items():
        monkeypatch.setitem(sys.modules, name, m)
    monkeypatch.setenv("FLA_FLASH_QLA", "0")
    comp = importlib.import_module("kernels.gdn_prefill.competitors")
    monkeypatch.setattr(comp, "_GROUPED_OK", {})
    return comp, calls, state


def inputs(hk, hv, t=8):
    return {"q": torch.randn(t, hk, 4), "k": torch.randn(t, hk, 4), "v": torch.randn(t, hv, 4),
            "g": torch.zeros(t, hv), "beta": torch.ones(t, hv), "cu_seqlens": torch.tensor([0, t])}


def test_grouped_layout_is_checked_once_per_process(fake_fla):
    comp, calls, _ = fake_fla
    first = comp.fla(inputs(2, 4))
    assert calls == [(4, 4), (2, 4), (2, 4)]  # repeated, grouped, then the path probe
    assert "as given" in first.note
    calls.clear()
    comp.fla(inputs(1, 4))  # another head layout: no second check
    assert calls == [(1, 4)]


def test_a_disagreeing_grouped_call_repeats_heads_for_every_later_shape(fake_fla):
    comp, calls, state = fake_fla
    state["grouped_ok"] = False
    assert "repeated to 4 heads" in comp.fla(inputs(2, 4)).note
    calls.clear()
    later = comp.fla(inputs(1, 4))
    assert "repeated to 4 heads" in later.note and calls == [(4, 4)]
    later()
    assert calls[-1] == (4, 4)  # the timed call uses the repeated layout too
