"""The static policy: baselines pass; each way of reaching a forbidden call is refused, by line."""

from __future__ import annotations

import pytest

from aka.contract.ops import get_op, op_names
from aka.evaluate.static.policy import check_source

SPEC = get_op("fa4_prefill").spec

REFUSED = {
    "alias": ("import torch as t\ndef f(q):\n    return t.matmul(q, q)\n", 3, "'torch.matmul' is not allowed"),
    "from_import": ("from torch import matmul\n", 1, "'torch.matmul' is not allowed"),
    "functional_alias": ("import torch\nF = torch.nn.functional\n", 2, "'torch.nn.functional' is not allowed"),
    "import_functional": ("import torch.nn.functional as F\n", 1, "import of 'torch.nn.functional'"),
    "sdpa": ("import torch\no = torch.nn.functional.scaled_dot_product_attention\n", 2, "torch.nn"),
    # getattr is refused outright (a constant name included): attribute access is written as such
    "computed_getattr": ("import torch\nx = getattr(torch, 'mat' + 'mul')\n", 2, "'getattr' is not allowed"),
    "const_getattr": ("import torch\nx = getattr(torch, 'matmul')\n", 2, "'getattr' is not allowed"),
    "getattr_as_value": ("g = getattr\n", 1, "'getattr' is not allowed"),
    "method_call": ("def f(q, k):\n    return q.matmul(k)\n", 2, "tensor method '.matmul()'"),
    "method_laundered": ("def f(q, k):\n    m = q.bmm\n    return m(k)\n", 2, "tensor method '.bmm()'"),
    "method_getattr": ("def f(q, k):\n    return getattr(q, 'softmax')(-1)\n", 2, "'getattr' is not allowed"),
    "tensor_class_method": ("import torch\nx = torch.Tensor.matmul\n", 2, "'torch.Tensor.matmul'"),
    "at_operator": ("def f(q, k):\n    return q @ k\n", 2, "the @ operator"),
    "at_assign": ("def f(q, k):\n    q @= k\n", 2, "the @= operator"),
    "operator_matmul": ("import operator\nx = operator.matmul\n", 2, "'operator.matmul'"),
    "module_as_value": ("import torch\nT = torch\n", 2, "module 'torch' used as a value"),
    "submodule_as_value": ("import torch\ndef f(m):\n    return m\nf(torch.cuda)\n", 4, "'torch.cuda' used as a value"),
    "stream": ("import torch\ns = torch.cuda.Stream()\n", 2, "'torch.cuda.Stream' is not allowed"),
    "stream_ctx": ("from torch import cuda\nwith cuda.stream(None):\n    pass\n", 2, "'torch.cuda.stream'"),
    "os": ("import os\n", 1, "import of 'os'"),
    "subprocess": ("import subprocess\n", 1, "import of 'subprocess'"),
    "pathlib": ("from pathlib import Path\n", 1, "import from 'pathlib'"),
    "importlib": ("import importlib\n", 1, "import of 'importlib'"),
    "reference": ("from kernels.gdn_prefill.reference import reference\n", 1, "'kernels.gdn_prefill.reference'"),
    "aka": ("import aka.evaluate.checker.gate\n", 1, "import of 'aka.evaluate.checker.gate'"),
    "relative": ("from . import x\n", 1, "import from '.'"),
    "star": ("from torch import *\n", 1, "import *"),
    "open": ("x = open('/etc/passwd').read()\n", 1, "'open' is not allowed"),
    "exec": ("exec('x = 1')\n", 1, "'exec' is not allowed"),
    "eval": ("x = eval('1')\n", 1, "'eval' is not allowed"),
    "dunder_import": ("m = __import__('os')\n", 1, "'__import__' is not allowed"),
    "globals": ("g = globals()\n", 1, "'globals' is not allowed"),
    "dunder_attr": ("x = ().__class__.__base__.__subclasses__()\n", 1, "attribute '__"),
    "builtins": ("b = __builtins__\n", 1, "'__builtins__' is not allowed"),
    "monkeypatch": ("import torch\ntorch.empty = None\n", 2, "assigning to 'torch.empty'"),
    "triton_runtime": ("import triton\nd = triton.runtime.driver\n", 2, "'triton.runtime.driver' is not allowed"),
    "triton_escape": ("import triton.language as tl\ne = tl.core.builtins.open\n", 2, "reaches module 'builtins'"),
    "cpp_extension_unflagged": ("from torch.utils.cpp_extension import load_inline\n", 1, "torch.utils.cpp_extension"),
    "syntax": ("def (:\n", 1, "syntax error"),
    # walks around an allowed module (issue 16): module-valued attributes, evaluating strings, frames
    "dataclasses_sys": ("import dataclasses\nm = dataclasses.sys.modules\n", 2,
                        "'dataclasses.sys.modules' is not allowed"),
    "typing_sys": ("import typing\nm = typing.sys\n", 2, "'typing.sys' is not allowed"),
    "from_dataclasses_sys": ("from dataclasses import sys\n", 1, "'dataclasses.sys' is not allowed"),
    "dataclasses_builtins": ("import dataclasses\nb = dataclasses.builtins\n", 2, "'dataclasses.builtins'"),
    "functools_module": ("import functools\nx = functools.abc\n", 2, "'functools.abc' is not allowed"),
    "type_hints_eval": ("from typing import get_type_hints\n", 1, "'typing.get_type_hints' is not allowed"),
    "forward_ref": ("import typing\nr = typing.ForwardRef('x')\n", 2, "'typing.ForwardRef' is not allowed"),
    "itertools_private": ("import itertools\nx = itertools._tee\n", 2, "'itertools._tee' is not allowed"),
    "gen_frame": ("def g():\n    yield 1\nf = g().gi_frame.f_back\n", 3, "attribute '.gi_frame'"),
    "frame_globals": ("def f(fr):\n    return fr.f_globals\n", 2, "attribute '.f_globals'"),
    "traceback_frame": ("def f(e):\n    return e.tb_frame\n", 2, "attribute '.tb_frame'"),
    "vars": ("v = vars()\n", 1, "'vars' is not allowed"),
    "locals": ("v = locals()\n", 1, "'locals' is not allowed"),
    "compile": ("c = compile('1', 'x', 'eval')\n", 1, "'compile' is not allowed"),
    "setattr": ("import torch\nsetattr(torch, 'empty', None)\n", 2, "'setattr' is not allowed"),
    "dir": ("d = dir()\n", 1, "'dir' is not allowed"),
    "argv": ("def f(x):\n    return x.argv\n", 2, "attribute '.argv'"),
    "environ": ("def f(x):\n    return x.environ\n", 2, "attribute '.environ'"),
    "mro": ("def f(x):\n    return type(x).mro()\n", 2, "attribute '.mro'"),
    "value_monkeypatch": ("import torch\ndef f(x):\n    type(x).masked_fill = None\n", 3,
                          "assigning to attribute '.masked_fill'"),
    "alias_monkeypatch": ("from torch import Tensor\nTensor.masked_fill = None\n", 2,
                          "assigning to 'torch.Tensor.masked_fill'"),
    "torch_function": ("import torch\nclass T:\n    def __torch_function__(self, *a):\n        pass\n", 3,
                       "defining '__torch_function__'"),
    "finalizer": ("class T:\n    def __del__(self):\n        pass\n", 2, "defining '__del__'"),
    "getattr_hook": ("class T:\n    def __getattr__(self, n):\n        pass\n", 2, "defining '__getattr__'"),
}


@pytest.mark.parametrize("key", list(REFUSED))
def test_refused(key):
    source, line, text = REFUSED[key]
    report = check_source(source, SPEC)
    assert not report.ok
    assert any(v.line == line and text in v.message for v in report.violations), report.message


ALLOWED = """
from __future__ import annotations
import functools
import math
from typing import Optional
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.tools.tensor_descriptor import TensorDescriptor

@triton.jit
def _k(x_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(x_ptr + r)
    tl.store(x_ptr + r, libdevice.exp(x).sort(0).to(tl.float32))  # Triton tensor methods inside jit

@functools.lru_cache(maxsize=4)
def _sms(device):
    if device.type != "cuda":
        return 132
    return torch.cuda.get_device_properties(device).multi_processor_count

def fa4_prefill(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale: Optional[float] = None):
    o = torch.empty_like(q)
    n = int(kv_lens.shape[0]).bit_length()
    _k[(triton.cdiv(n, 1),)](o.view(-1), N=16)
    return o.contiguous() if math.isfinite(1.0) else o
"""


def test_glue_and_kernels_pass():
    report = check_source(ALLOWED, SPEC)
    assert report.ok, report.message
    assert report.message == ""


def test_tensor_method_outside_jit_is_refused_even_if_triton_has_it():
    report = check_source("def f(x):\n    return x.sort(0).exp()\n", SPEC)
    assert [v.message for v in report.violations] == [
        "tensor method '.exp()' is not allowed (glue only: see allowed_methods)"
    ]


def test_self_attributes_and_own_dunders_stay_allowed():
    src = ("from dataclasses import dataclass, field\nimport functools\n\n@dataclass\nclass Plan:\n"
           "    n: int = 1\n    xs: list = field(default_factory=list)\n\n    def __post_init__(self):\n"
           "        self.n = max(self.n, 1)\n\n    def __repr__(self):\n        return 'plan'\n\n"
           "@functools.lru_cache(maxsize=None)\ndef f(n):\n    return Plan(n)\n")
    report = check_source(src, SPEC)
    assert report.ok, report.message


def test_cpp_extension_behind_a_flag():
    src = "from torch.utils.cpp_extension import load_inline\n"
    assert not check_source(src, SPEC).ok
    assert check_source(src, SPEC, allow_cuda_extension=True).ok


@pytest.mark.parametrize("op", op_names())  # every contract in workloads/
def test_baselines_pass(op):
    o = get_op(op)
    report = check_source(o.path("baseline").read_text(), o.spec)
    assert report.ok, report.message


def test_allowed_torch_comes_from_the_contract():
    src = "import torch\nx = torch.repeat_interleave\n"
    assert check_source(src, get_op("gdn_prefill").spec).ok  # gdn lists it
    assert not check_source(src, get_op("fa4_decode").spec).ok  # fa4_decode does not


def test_the_codegen_prompt_states_exactly_what_the_policy_allows():
    from aka.agent.llm.prompts import policy_text
    from aka.evaluate.static.policy import rules_text
    from aka.evaluate.static.policy_names import STDLIB_NAMES

    spec = get_op("fa4_decode").spec
    text = policy_text(spec, "triton")
    assert text == rules_text(spec)
    for name in sorted(STDLIB_NAMES["functools"]):  # the fa4_decode baseline imports functools
        assert name in text
    assert "get_type_hints" not in text and "torch.utils.cpp_extension" not in text
    assert "torch.utils.cpp_extension (load_inline only)" in policy_text(spec, "cuda")
    assert "integer index bookkeeping" in text  # the run-time launch rule is stated too


GLUON = """
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

@gluon.jit
def _copy(in_desc, out_desc):
    smem = gl.allocate_shared_memory(in_desc.dtype, in_desc.block_type.shape, in_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, in_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(in_desc, [0, 0], bar, smem)
    mbarrier.wait(bar, phase=0)
    mbarrier.invalidate(bar)
    fence_async_shared()
    tma.async_copy_shared_to_global(out_desc, [0, 0], smem)
    tma.store_wait(pendings=0)

def fa4_prefill(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale=None):
    o = torch.empty_like(q)
    layout = gl.NVMMASharedLayout.get_default_for([64, 64], gl.bfloat16)
    _copy[(1,)](TensorDescriptor.from_tensor(q, [64, 64], layout), TensorDescriptor.from_tensor(o, [64, 64], layout))
    return o
"""


def test_a_gluon_kernel_passes_as_a_triton_one_does():
    """Gluon (triton.experimental.gluon: TMA, mbarriers, warpgroup_mma, warp_specialize) is the path to
    warp-specialised kernels (issue 39); its kernels are checked by the same rules."""
    report = check_source(GLUON, SPEC)
    assert report.ok, report.message


@pytest.mark.parametrize("source,text", [
    ("import triton.experimental\nx = triton.experimental.other\n", "only triton.experimental.gluon"),
    ("from triton.experimental.gluon import language as gl\n\ndef f(x):\n    return x.exp()\n",
     "tensor method '.exp()' is not allowed"),
    ("from triton.experimental import gluon\n\n@gluon.jit\ndef k(x):\n    pass\n\ndef f(x):\n    return x @ x\n",
     "the @ operator is not allowed"),
])
def test_gluon_opens_no_other_door(source, text):
    report = check_source(source, SPEC)
    assert any(text in v.message for v in report.violations), report.message
