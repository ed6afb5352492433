"""Registers and spills without a GPU (issue 19, the compile tool on CPU): the launches the interpreter ran,
compiled for sm_90 with Triton's own ptxas (aka.evaluate.static.offline_sm90)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aka.contract.ops import get_op, load_module
from aka.evaluate.host.interp import interpreter_requested
from aka.evaluate.parent.runner import run_task
from aka.evaluate.static.compstats import CompileStats
from aka.evaluate.static.offline_sm90 import capture, signature
from aka.evaluate.wire import OfflinePayload

TOY = Path(__file__).parents[1] / "support" / "toyop"


class _Param:
    def __init__(self, name, is_constexpr=False):
        self.name, self.is_constexpr = name, is_constexpr


class _Fn:
    params = [_Param("x_ptr"), _Param("n"), _Param("big"), _Param("scale"), _Param("flag"), _Param("opt_ptr"),
              _Param("PREC", True), _Param("BLOCK", True), _Param("unused")]


def test_a_launch_becomes_tritons_signature_and_constexprs():
    args = {"x_ptr": {"tensor": "bfloat16"}, "n": {"int": 7}, "big": {"int": 2**40}, "scale": {"float": 0.5},
            "flag": {"bool": True}, "opt_ptr": {"none": True}, "PREC": {"str": "tf32"}, "BLOCK": {"int": 64}}
    sig, consts = signature(_Fn, args)
    assert sig == {"x_ptr": "*bf16", "n": "i32", "big": "i64", "scale": "fp32", "flag": "i1", "opt_ptr": "constexpr",
                   "PREC": "constexpr", "BLOCK": "constexpr"}
    assert consts == {"opt_ptr": None, "PREC": "tf32", "BLOCK": 64}  # 'unused' was not passed: its default
    with pytest.raises(ValueError, match="has no Triton type"):
        signature(_Fn, {"x_ptr": {"other": "<object>"}})


@pytest.mark.skipif(not interpreter_requested(), reason="captures interpreter launches (the CPU suite)")
def test_the_interpreters_launches_compile_for_sm90_on_this_machine():
    op = get_op("scale_add", TOY)
    module = load_module(op.path("baseline"))
    case = min(op.cases("smoke"), key=op.flops)
    with capture() as launches:
        module.scale_add(**op.inputs.make_inputs(case, 0, "cpu"))
    assert [x.name for x in launches] == ["_kernel"]
    assert launches[0].args["BLOCK"] == {"int": 128} and launches[0].args["x_ptr"] == {"tensor": "float32"}
    res = run_task("aka.evaluate.static.offline_sm90:compile_task",
                   OfflinePayload(path=str(op.path("baseline")), launches=launches), timeout=300, interpreter=False)
    assert res.ok, res.error
    cs = CompileStats.model_validate(res.value)
    (k,) = cs.kernels
    assert cs.available and k.name == "_kernel" and k.arch == "sm_90" and k.regs_from == "cuobjdump"
    assert 0 < k.n_regs < 64 and k.n_spills == 0 and k.num_warps == 4
