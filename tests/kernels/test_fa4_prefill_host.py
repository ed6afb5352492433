"""fa4_prefill's host path (issue 18 point 3, "no fixed cost"), in the interpreter.

- The per-shape plan cache and the cached TMA descriptors change no result: outputs are
  bit-identical to the pre-change baseline (kernels/fa4_prefill/baseline.py at 34a95c1, read from git
  history, run in the same process on the same inputs) on the contract's smoke and edge shapes, under the default CONFIG
  (TMA descriptors, packed head groups; given to the old module too) and a small pointer-gather CONFIG, and
  stay within the float64 reference's tolerance. The entry's "auto" runs the Triton kernel here (the
  interpreter; tests/kernels/test_fa4_prefill_dispatch.py).
- The descriptor cache never serves a stale cache: a different K/V pair of the same shape gets its
  own descriptors.
- What one warm call does on the host is pinned (aka.evaluate.host.launches.Recorder), so a re-added view,
  allocation or host sync (.item() dispatches _local_scalar_dense) fails here. Timing needs the
  H200 (`aka bench fa4_prefill`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from aka.contract.ops import get_op  # noqa: E402
from aka.evaluate.host.interp import install_bf16_dot_shim  # noqa: E402
from aka.evaluate.host.launches import Recorder  # noqa: E402

install_bf16_dot_shim()
mod = importlib.import_module("kernels.fa4_prefill.baseline")
op = get_op("fa4_prefill")
CASES = [c for s in ("smoke", "edge") for c in op.cases(s)]

SMALL = dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1, USE_TMA=False, WARP_SPEC=False)


def _old():
    """The baseline before issue 18 point 3 (34a95c1), from git history."""
    from pre_change import old_baseline

    return old_baseline("fa4_prefill")


def run_both(x, cfg=None, **kw):
    """Both modules' entry on x, each with the same Triton CONFIG: the current defaults (the values promoted
    on 2026-12-03, kernels/fa4_prefill/stages/entry.py) with cfg laid over them; the entry's "auto" runs the
    Triton kernel here (the interpreter)."""
    from pre_change import run_both as both

    old = _old()
    same = {**{k: mod.CONFIG[k] for k in old.CONFIG}, **(cfg or {})}
    if same["BLOCK_M"] % (x["q"].shape[1] // x["k_cache"].shape[2]):
        same["PACK_GQA"] = False  # what the current plan does itself for such a group; the old one asserted
    return both(mod, old, "fa4_prefill", x, same, **kw)


def rel_l2(o, ref):
    return ((o.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("cfg", [None, SMALL], ids=["default", "small"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bit_identical_to_pre_change(case, cfg):
    x = op.inputs.make_inputs(case, 1, "cpu")
    new, prev = run_both(x, cfg)
    assert torch.equal(new, prev)
    again, _ = run_both(x, cfg)  # the second call takes the cached plan and descriptors
    assert torch.equal(again, prev)
    if cfg is None and new.numel():
        ref = op.reference.reference(**x)[0]
        assert rel_l2(new, ref) <= 1e-2


def test_descriptor_cache_follows_the_cache_tensors():
    case = op.cases("S1")[0]
    a, b = op.inputs.make_inputs(case, 5, "cpu"), op.inputs.make_inputs(case, 6, "cpu")
    oa, _ = run_both(a)
    ob, ob_old = run_both(b)  # same shapes, other K/V tensors: fresh descriptors
    assert torch.equal(ob, ob_old) and not torch.equal(oa, ob)
    b["k_cache"] = b["k_cache"].clone()  # same values, new tensor object: rebuilt, same result
    oc, _ = run_both(b)
    assert torch.equal(oc, ob)
    assert mod._DESCS[0][0] is b["k_cache"]


def test_scale_and_config_swap_get_their_own_plan():
    x = op.inputs.make_inputs(op.cases("S2")[0], 2, "cpu")
    a, a_old = run_both(x, SMALL, softmax_scale=0.1)
    b, b_old = run_both(x, dict(SMALL, BLOCK_M=16, SPLIT_CAUSAL=False))
    assert torch.equal(a, a_old) and torch.equal(b, b_old)
    assert not torch.equal(a, b)


def record(fn, x):
    fn(**x)  # warm: plan and descriptors built, kernel compiled
    with Recorder() as rec:
        fn(**x)
    return rec.launches


def test_host_work_per_warm_call():
    old = _old()
    x = op.inputs.make_inputs(op.cases("E1")[0], 3, "cpu")  # one new token, the default (TMA) CONFIG
    new, prev = record(mod.fa4_prefill, x), record(old.fa4_prefill, x)
    assert new.triton == {"_fa4_prefill_kernel": 1} == prev.triton
    assert prev.torch_ops == {"empty_like": 1, "view": 2}  # the two descriptors' cache views, per call
    assert new.torch_ops == {"empty_like": 1}, new.torch_ops  # the output only; no host sync
    assert not new.torch_compute


def test_baseline_passes_the_contract_policy():
    from aka.evaluate.static.policy import check_source

    report = check_source(Path(mod.__file__).read_text(), op.spec)
    assert report.ok, report
