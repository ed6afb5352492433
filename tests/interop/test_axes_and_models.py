"""The pieces under the FlashInfer-Bench interop: shape expressions as axes, and aka's copy of the
FIB 0.1.2 schema (these always run: flashinfer-bench itself is optional)."""

import math

import pytest
import torch
from pydantic import ValidationError

from aka.interop import blob
from aka.interop.axes import bind, parse_shape
from aka.interop.fib_models import BuildSpec, Correctness, Definition, Environment, Evaluation, error_lines


def test_names_literals_and_expressions_become_axes():
    q, cu, rows = parse_shape("[T_total, HK, 128]"), parse_shape("[N+1]"), parse_shape("[B * q_len, Hq, 256]")
    assert [(d.kind, d.axis) for d in q] == [("name", "T_total"), ("name", "HK"), ("const", "const_128")]
    assert (cu[0].kind, cu[0].axis, cu[0].expr) == ("expr", "N_plus_1", "N + 1")
    assert rows[0].axis == "B_times_q_len" and rows[0].expr == "B * q_len"
    with pytest.raises(ValueError, match="more than names, integers"):
        parse_shape("[f(N)]")
    with pytest.raises(ValueError, match="expected"):
        parse_shape("T, 3")


def test_bind_reads_the_tensors_and_solves_what_only_an_expression_pins():
    dims = {"cu": parse_shape("[N+1]"), "h0": parse_shape("[N, HV]"), "q": parse_shape("[T, HV, 128]")}
    # h0 absent (optional): N comes from N+1 = 5
    assert bind(dims, {"cu": (5,), "q": (40, 2, 128)}) == {"N_plus_1": 5, "T": 40, "HV": 2, "N": 4}
    with pytest.raises(ValueError, match="dimension 128 is 64"):
        bind(dims, {"cu": (5,), "q": (40, 2, 64)})
    with pytest.raises(ValueError, match="q: axis HV is 2 here and 3 in another tensor"):
        bind(dims, {"cu": (5,), "q": (40, 2, 128), "h0": (4, 3)})
    with pytest.raises(ValueError, match=r"N \+ 1 = 4 but the inputs say 5"):
        bind(dims, {"cu": (5,), "q": (40, 2, 128), "h0": (3, 2)})


def test_safetensors_blob_round_trips_and_follows_the_format(tmp_path):
    t = {"cu_seqlens": torch.tensor([0, 3, 7], dtype=torch.int32), "table": torch.arange(6).view(2, 3)}
    blob.save(t, tmp_path / "x.safetensors")
    raw = (tmp_path / "x.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert n % 8 == 0 and raw[8:8 + n].decode().startswith('{"cu_seqlens":{"dtype":"I32","shape":[3]')
    back = blob.load(tmp_path / "x.safetensors")
    assert all(torch.equal(back[k], v) and back[k].dtype == v.dtype for k, v in t.items())


def _definition(**over):
    d = {"name": "x", "op_type": "t", "axes": {"N": {"type": "var"}, "D": {"type": "const", "value": 4}},
         "inputs": {"a": {"shape": ["N", "D"], "dtype": "float32"}, "s": {"shape": None, "dtype": "float32"}},
         "outputs": {"o": {"shape": ["N", "D"], "dtype": "float32"}}, "reference": "def run(a, s):\n    return a\n"}
    return {**d, **over}


def test_our_models_reject_what_flashinfer_bench_rejects():
    Definition.model_validate(_definition())
    cases = {"reference": "def main(a, s):\n    return a\n", "outputs": {"a": {"shape": ["N"], "dtype": "float32"}},
             "constraints": ["N =="]}
    for field, value in cases.items():
        with pytest.raises(ValidationError):
            Definition.model_validate(_definition(**{field: value}))
    with pytest.raises(ValidationError, match="undefined axis"):
        Definition.model_validate(_definition(outputs={"o": {"shape": ["M"], "dtype": "float32"}}))
    with pytest.raises(ValidationError, match="entry point"):
        BuildSpec(language="triton", target_hardware=["cuda"], entry_point="main.py")
    with pytest.raises(ValidationError, match="performance required"):
        Evaluation(status="PASSED", environment=Environment(hardware="h"), timestamp="t", correctness=Correctness())
    assert math.isnan(Correctness(max_relative_error=math.nan).max_relative_error)  # NaN: "not measured"


def test_error_lines_name_each_field_without_union_tags():
    bad = _definition(axes={"N": {"type": "const"}, "M": {"type": "foo"}})
    with pytest.raises(ValidationError) as err:
        Definition.model_validate(bad)
    assert error_lines(err.value) == ["field 'axes.N.value': Field required",
                                      "field 'axes.M': type 'foo': expected one of 'const', 'var'"]
