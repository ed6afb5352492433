"""On the GPU (AKA_TEST_ON_GPU=1 pytest -m gpu tests/knowledge/test_profile_gpu.py): the collector on the real baseline
against the compiler's own resource report, and one ncu profile end to end on a small shape."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

# the forward CONFIG "fwd" picks per call: the Gluon one on sm_90 with K = V = 128, the Triton one elsewhere
_FORWARDS = ("_fwd_ws_kernel", "_fwd_kernel")


@pytest.fixture(scope="module")
def ran_baseline():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from aka.contract.ops import get_op, load_module

    op = get_op("gdn_prefill")
    module = load_module(op.path("baseline"))
    (case,) = op.cases("S1")
    getattr(module, op.spec.entry)(**op.inputs.make_inputs(case, 0, "cuda"))
    torch.cuda.synchronize()
    return op, module


def test_compile_stats_of_the_baseline_match_cuobjdump(ran_baseline):
    from aka.evaluate.static.compstats import collect, compiled_kernels, find_kernels, res_usage

    _, module = ran_baseline
    cs = collect(module, interpreter=False)
    assert cs.available, cs.reason
    names = {k.name for k in cs.kernels}
    assert "_prep64_kernel" in names and names & set(_FORWARDS), names
    for k in cs.kernels:
        assert k.regs_from == "driver" and k.arch == "sm_90" and k.num_warps > 0
    for name in names & set(_FORWARDS):
        fwd = cs.by_name()[name]
        assert fwd.has_wgmma or fwd.has_mma, name  # every dot lands on tensor cores
    for jit in find_kernels(module).values():
        for ck in compiled_kernels(jit):
            ref = res_usage(ck.asm["cubin"]).get(ck.metadata.name)
            if ref is None:
                pytest.skip("no cuobjdump on this machine")
            assert ck.n_regs == ref["REG"], ck.metadata.name
            # the driver's local size (Triton's n_spills * 4) is the stack frame plus spills: the Gluon
            # forward's warp-specialised partitions keep a 32-byte stack with no spill (H100, 2026-12-07)
            assert ck.n_spills == (ref["STACK"] + ref["LOCAL"]) // 4, ck.metadata.name


def test_profile_end_to_end_on_a_small_shape(ran_baseline, tmp_path: Path):
    from aka.knowledge.profile import run_profile

    op, _ = ran_baseline
    s = run_profile(op, op.path("baseline"), "S1", timeout=240, workdir=tmp_path)
    assert s.kernels, s.notes
    assert s.compile and s.compile.available
    launched = {k.name for k in s.kernels}
    assert launched <= {k.name for k in s.compile.kernels}, (launched, s.notes)
    if s.source == "ncu":
        fwd = next(k for k in s.kernels if k.name in _FORWARDS)
        assert fwd.duration_us and fwd.duration_us > 0 and fwd.sm_throughput_pct is not None
        assert fwd.registers_per_thread == s.compile.by_name()[fwd.name].n_regs
    else:
        assert any("ncu not used" in n for n in s.notes)
