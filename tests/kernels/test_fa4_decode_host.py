"""fa4_decode's host path (issue 18 point 3, "no fixed cost"), in the interpreter.

- The per-shape plan cache and the single partials allocation change no result: outputs are
  bit-identical to the pre-change baseline (kernels/fa4_decode/baseline.py at 34a95c1, read from git
  history, run in the same process on the same inputs) on the contract's smoke and edge shapes and on CONFIG points that
  force many splits or none, and stay within the float64 reference's tolerance.
- What one warm call does on the host is pinned (aka.evaluate.host.launches.Recorder): its torch operators and
  Triton launches, so a re-added allocation, an index tensor or a host sync (.item() dispatches
  _local_scalar_dense) fails here. Timing needs the H200 (`aka bench fa4_decode`).
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
mod = importlib.import_module("kernels.fa4_decode.baseline")
op = get_op("fa4_decode")
CASES = [c for s in ("smoke", "edge") for c in op.cases(s)]

SPLITTY = dict(BLOCK_N=32, SPLIT_TARGET=64, MIN_SPLIT_TOKENS=32, REDUCE_BLOCK_S=4)
NOSPLIT = dict(BLOCK_N=64, SPLIT_TARGET=1)


def _old():
    """The baseline before issue 18 point 3 (34a95c1), from git history."""
    from pre_change import old_baseline

    return old_baseline("fa4_decode")


def run_both(x, cfg=None, **kw):
    from pre_change import run_both as both

    return both(mod, _old(), "fa4_decode", x, cfg, **kw)


def rel_l2(o, ref):
    return ((o.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("cfg", [None, SPLITTY, NOSPLIT], ids=["default", "split", "nosplit"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bit_identical_to_pre_change(case, cfg):
    x = op.inputs.make_inputs(case, 1, "cpu")
    # default: today's CONFIG on both (its block sizes and stages; the old file ignores the knobs it
    # lacks, so TMA boxes here meet the old pointer gather: the same values, the same sums)
    new, prev = run_both(x, cfg or dict(mod.CONFIG))
    assert torch.isfinite(new).all()
    assert torch.equal(new, prev)
    again, _ = run_both(x, cfg or dict(mod.CONFIG))  # the second call takes the cached plan
    assert torch.equal(again, prev)
    if cfg is None:
        ref = op.reference.reference(**x)[0]
        assert rel_l2(new, ref) <= 1e-2


def test_scale_and_config_swap_get_their_own_plan():
    x = op.inputs.make_inputs(op.cases("S2")[0], 2, "cpu")
    a, a_old = run_both(x, SPLITTY, softmax_scale=0.2)
    b, b_old = run_both(x, NOSPLIT)  # same shapes, other CONFIG: must not reuse the SPLITTY plan
    assert torch.equal(a, a_old) and torch.equal(b, b_old)
    assert not torch.equal(a, b)


def record(fn, x):
    fn(**x)  # warm: plan built, kernel compiled
    with Recorder() as rec:
        fn(**x)
    return rec.launches


def test_host_work_per_warm_call():
    old = _old()
    x = op.inputs.make_inputs(op.cases("S1")[0], 3, "cpu")
    saved = dict(mod.CONFIG), dict(old.CONFIG)
    try:
        for m in (mod, old):
            m.CONFIG.update(SPLITTY)
        new, prev = record(mod.fa4_decode, x), record(old.fa4_decode, x)
    finally:
        for m, c in zip((mod, old), saved):
            m.CONFIG.clear()
            m.CONFIG.update(c)
    assert new.triton == {"_fa4_decode_kernel": 1, "_fa4_decode_merge_kernel": 1} == prev.triton
    assert prev.torch_ops == {"empty_like": 1, "empty": 2}
    # one workspace allocation (+ two views of it) instead of two; nothing that reads a device value
    assert new.torch_ops == {"empty_like": 1, "empty": 1, "slice": 2}, new.torch_ops
    assert not new.torch_compute

    # FUSED_MERGE: the merge inside the split kernel, one launch; its counters a zeroed allocation
    try:
        mod.CONFIG.update(SPLITTY, FUSED_MERGE=True)
        fused = record(mod.fa4_decode, x)
    finally:
        mod.CONFIG.clear()
        mod.CONFIG.update(saved[0])
    assert fused.triton == {"_fa4_decode_kernel": 1}, fused.triton
    assert fused.torch_ops == {"empty_like": 1, "empty": 1, "slice": 2, "zeros": 1}, fused.torch_ops

    x1 = op.inputs.make_inputs(op.cases("E1")[0], 3, "cpu")  # a single key: one split, one launch
    one = record(mod.fa4_decode, x1)
    assert one.triton == {"_fa4_decode_kernel": 1} and one.torch_ops == {"empty_like": 1}


def test_outputs_never_alias():
    x = op.inputs.make_inputs(op.cases("S1")[0], 4, "cpu")
    a = mod.fa4_decode(**x)
    b = mod.fa4_decode(**x)
    assert a.data_ptr() != b.data_ptr() and torch.equal(a, b)


def test_baseline_passes_the_contract_policy():
    from aka.evaluate.static.policy import check_source

    report = check_source(Path(mod.__file__).read_text(), op.spec)
    assert report.ok, report
