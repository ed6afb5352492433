"""fa4_prefill's entry picks one of its two kernels per call (kernels/fa4_prefill/stages/entry.py, CONFIG
"kernel"): the Gluon kernel only on an NVIDIA sm_90 GPU, outside Triton's interpreter, for the inputs it takes;
the Triton kernel everywhere else. In the CPU interpreter: "auto" runs Triton; "gluon" and an unknown value
are refused before any launch; the rules for a GPU call are checked on stand-in tensors (no GPU here: the
Gluon kernel itself is compiled offline by scripts/device/fa4_gluon_compile.py and run on the device)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from aka.contract.ops import get_op  # noqa: E402
from aka.evaluate.host.interp import install_bf16_dot_shim  # noqa: E402
from aka.evaluate.host.launches import Recorder  # noqa: E402
from aka.evaluate.static.policy import check_source  # noqa: E402

install_bf16_dot_shim()
op = get_op("fa4_prefill")  # renders baseline.py from the stage files
mod = importlib.import_module("kernels.fa4_prefill.baseline")
ARGS = ("q", "k_cache", "v_cache", "page_table", "cu_seqlens_q", "kv_lens")


@pytest.fixture
def config():
    """mod.CONFIG, restored after the test."""
    saved = dict(mod.CONFIG)
    yield mod.CONFIG
    mod.CONFIG.clear()
    mod.CONFIG.update(saved)


def _inputs(sid="S2", seed=0):
    return op.inputs.make_inputs(op.cases(sid)[0], seed, "cpu")


def test_the_rendered_module_holds_both_kernels_and_passes_the_policy():
    src = op.path("baseline").read_text()
    for stage in ("entry", "common", "triton_fwd", "gluon_fwd"):
        assert f"\n# {stage}.py\n" in src
    assert src.count("\ndef _fa4_prefill_kernel(") == 1 and src.count("\ndef _fa4_prefill_gluon_kernel(") == 1
    assert src.count("\n@triton.jit\ndef _fa4_prefill_kernel(") == 1
    assert src.count("\n@gluon.jit\ndef _fa4_prefill_gluon_kernel(") == 1
    assert mod.CONFIG["kernel"] == "auto" and set(mod.SPACE["kernel"]) == {"auto", "triton", "gluon"}
    report = check_source(src, op.spec)
    assert report.ok, report.message
    assert Path(mod.__file__).resolve() == op.path("baseline").resolve()


def test_the_triton_defaults_are_the_values_promoted_on_the_h200():
    """promoted.json's CONFIG (run 20261203-065104-64d7bb, attempt 6) became the Triton kernel's defaults."""
    promoted = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2, "PACK_GQA": True,
                "SPLIT_CAUSAL": True, "USE_TMA": True, "WARP_SPEC": False}
    assert {k: mod.CONFIG[k] for k in promoted} == promoted
    assert op.promoted_kernel() is None and op.default_kernel() == op.path("baseline")


def test_auto_in_the_interpreter_runs_the_triton_kernel():
    assert mod._INTERPRETED  # this process imported the module under TRITON_INTERPRET=1
    x = _inputs()
    mod.fa4_prefill(**x)  # warm
    with Recorder() as rec:
        o = mod.fa4_prefill(**x)
    assert rec.launches.triton == {"_fa4_prefill_kernel": 1}
    ref = op.reference.reference(**x)[0]
    assert ((o.double() - ref).norm() / ref.norm()).item() <= 1e-2


@pytest.mark.parametrize("kernel,match", [
    ("Gluon", r"CONFIG\['kernel'\] is 'auto', 'triton' or 'gluon', not 'Gluon'"),
    (None, r"not None"),
    ("gluon", r"'gluon' but the Gluon kernel cannot run this call: the tensors are not on a CUDA GPU"),
])
def test_a_kernel_that_cannot_run_is_refused_before_any_launch(config, kernel, match):
    config["kernel"] = kernel
    x = _inputs()
    with Recorder() as rec, pytest.raises(ValueError, match=match):
        mod.fa4_prefill(**x)
    assert rec.launches.triton == {} and rec.launches.torch_ops == {}


def test_the_hand_off_follows_the_kernel_value_and_the_rules(config, monkeypatch):
    """The hand-off itself: "auto" takes the Gluon forward exactly when _gluon_unfit says it can, "triton"
    never does, "gluon" does (stand-ins for both forwards: no kernel runs)."""
    calls = []
    monkeypatch.setattr(mod, "_gluon_forward", lambda *a: calls.append(("gluon", a[-1]["kernel"])))
    monkeypatch.setattr(mod, "_triton_forward", lambda *a: calls.append(("triton", a[-1]["kernel"])))
    x = _inputs()
    for unfit in ("", "no"):
        monkeypatch.setattr(mod, "_gluon_unfit", lambda *a, u=unfit: u)
        for kernel in ("auto", "triton", "gluon"):
            config["kernel"] = kernel
            if kernel == "gluon" and unfit:
                with pytest.raises(ValueError, match="cannot run this call: no;"):
                    mod.fa4_prefill(**x)
            else:
                mod.fa4_prefill(**x)
    assert calls == [("gluon", "auto"), ("triton", "triton"), ("gluon", "gluon"),
                     ("triton", "auto"), ("triton", "triton")]


class _OnGpu:
    """A CPU tensor that says it is on CUDA device 0: what _gluon_unfit reads of a call's tensors."""

    is_cuda = True

    def __init__(self, t: torch.Tensor, offset: int = 0):
        self.t, self.offset = t, offset
        self.shape, self.dtype = t.shape, t.dtype

    def get_device(self):
        return 0

    def is_contiguous(self):
        return self.t.is_contiguous()

    def data_ptr(self):
        return self.t.data_ptr() + self.offset


def _gpu_case(**change):
    """A contract-shaped call (Hq 4, Hkv 1, D 256, page 64) as stand-ins; `change` replaces tensors."""
    x = {**_inputs("S1"), **change}
    return [_OnGpu(x[a]) if isinstance(x[a], torch.Tensor) else x[a] for a in ARGS]


@pytest.fixture
def sm90(monkeypatch):
    """This module as it is on an H100: imported without the interpreter, device 0 an NVIDIA sm_90."""
    monkeypatch.setattr(mod, "_INTERPRETED", False)
    monkeypatch.setattr(mod, "_SM90", {})
    monkeypatch.setattr(mod, "_ROUTES", {})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "NVIDIA H100 80GB HBM3")


def test_on_an_sm90_gpu_the_gluon_kernel_takes_what_it_supports(sm90):
    assert mod._gluon_unfit(*_gpu_case()) == ""
    x = _inputs("S1")
    bf = torch.bfloat16
    unfit = {
        "head dim 128/128, the kernel's is 256": dict(q=x["q"][..., :128].contiguous(),
                                                      k_cache=x["k_cache"][..., :128].contiguous(),
                                                      v_cache=x["v_cache"][..., :128].contiguous()),
        "pages of 32 tokens, the kernel's are 64": dict(k_cache=x["k_cache"][:, :32].contiguous(),
                                                        v_cache=x["v_cache"][:, :32].contiguous()),
        "not bfloat16": dict(q=x["q"].half()),
        "not int32": dict(page_table=x["page_table"].long()),
        "both caches [pages, page, Hkv, D] alike": dict(v_cache=torch.zeros(3, 64, 1, 256, dtype=bf)),
        "must be contiguous": dict(q=x["q"].transpose(0, 1).contiguous().transpose(0, 1)),
    }
    for why, change in unfit.items():
        assert why in mod._gluon_unfit(*_gpu_case(**change)), why
    case = _gpu_case()
    case[0] = _OnGpu(x["q"], offset=2)  # a bf16 view one element in: TMA needs 16-byte aligned bases
    assert "16-byte aligned" in mod._gluon_unfit(*case)


def test_the_device_and_the_interpreter_rule_gluon_out(sm90, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (10, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "NVIDIA B200")
    assert mod._gluon_unfit(*_gpu_case()) == "NVIDIA B200 (capability 10.0) is not an NVIDIA sm_90 GPU"
    monkeypatch.setattr(mod, "_SM90", {})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "AMD Instinct MI250X")  # ROCm's gfx90a
    assert "is not an NVIDIA sm_90 GPU" in mod._gluon_unfit(*_gpu_case())
    monkeypatch.setattr(mod, "_SM90", {})
    monkeypatch.setattr(mod, "_INTERPRETED", True)
    assert "interpreter" in mod._gluon_unfit(*_gpu_case())


def test_the_device_is_asked_once_and_a_shape_decided_once(sm90, monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: asked.append(i) or (9, 0))
    monkeypatch.setattr(mod, "_shapes_unfit", lambda *a: asked.append("shapes") or "")
    for _ in range(3):
        assert mod._gluon_unfit(*_gpu_case()) == ""
    assert asked == [0, "shapes"]
