"""The kernels' launch cache (_Launch: fa4's, issue 18 point 3; gdn's, issue 38's host cost): a warm call
skips Triton's per-call binding by launching the compiled kernel itself, but only where Triton would have
picked that same compiled kernel. A fake JIT function stands in for Triton (the interpreter compiles
nothing)."""

from __future__ import annotations

import importlib

import pytest
import torch

from aka.contract.ops import get_op

MODULES = ["kernels.fa4_decode.baseline", "kernels.fa4_prefill.baseline", "kernels.gdn_prefill.baseline"]


def _launcher(name, fn):
    """launch(grid, plan, args, kw) for every module: gdn's _Launch keys on the launch's keywords alone
    (its plans are the constexprs), so there the plan travels as one more keyword."""
    if name.startswith("kernels.gdn_prefill"):
        get_op("gdn_prefill")  # renders baseline.py from the stage files
        launch = importlib.import_module(name)._Launch(fn)
        return lambda grid, plan, args, kw: launch(grid, args, {**kw, "PLAN": plan})
    return importlib.import_module(name)._Launch(fn)


class FakeCompiled:
    packed_metadata = ()

    def __init__(self, log):
        self.log = log

    def __getitem__(self, grid):
        assert len(grid) == 3, grid  # Triton's compiled launcher reads grid[0], grid[1], grid[2]
        return lambda *args: self.log.append(("direct", grid, args))


class FakeJit:
    """Records each JIT launch and returns a compiled kernel, as JITFunction.__getitem__(grid)(...) does."""

    arg_names = ["x", "n", "scale", "BLOCK", "FLAG"]

    def __init__(self, compiles=True):
        self.log = []
        self.compiles = compiles

    def __getitem__(self, grid):
        def jit(*args, **kw):
            self.log.append(("jit", grid, args, kw))
            return FakeCompiled(self.log) if self.compiles else None

        return jit


def kinds(log):
    return [e[0] for e in log]


@pytest.mark.parametrize("name", MODULES)
def test_a_warm_call_launches_the_compiled_kernel_with_its_constexprs(name):
    fn = FakeJit()
    launch = _launcher(name, fn)
    x = torch.zeros(64, dtype=torch.bfloat16)
    kw = dict(BLOCK=64, FLAG=True, num_warps=4, num_stages=2)
    launch((2, 5), "plan", (x, 7, 0.5), kw)
    launch((2, 5), "plan", (x, 7, 0.5), kw)
    launch((3,), "plan", (torch.ones_like(x), 7, 0.5), kw)  # another aligned tensor, grid from the call
    assert kinds(fn.log) == ["jit", "direct", "direct"]
    assert fn.log[1][2][3:] == (64, True)  # every parameter in order: constexprs after the runtime args
    assert fn.log[1][1] == (2, 5, 1) and fn.log[2][1] == (3, 1, 1)  # padded to three axes


@pytest.mark.parametrize("name", MODULES)
def test_anything_triton_specialises_on_misses_the_cache(name):
    fn = FakeJit()
    launch = _launcher(name, fn)
    buf = torch.zeros(128, dtype=torch.bfloat16)
    x = buf[:64]
    kw = dict(BLOCK=64, FLAG=True)
    launch((1,), "plan", (x, 16, 0.5), kw)
    launch((1,), "plan", (buf[1:65], 16, 0.5), kw)  # 2-byte offset: not 16-byte aligned
    launch((1,), "plan", (x.float(), 16, 0.5), kw)  # another dtype
    launch((1,), "plan", (x, 1, 0.5), kw)  # an int Triton keys on (== 1)
    launch((1,), "plan", (x, 16, 0.25), kw)  # another scale
    launch((1,), "other plan", (x, 16, 0.5), kw)  # other constexprs / warps
    assert kinds(fn.log) == ["jit"] * 6
    launch((1,), "plan", (x, 16, 0.5), kw)
    assert kinds(fn.log)[-1] == "direct"


@pytest.mark.parametrize("name", MODULES)
def test_without_a_compiled_kernel_every_call_takes_the_jit_path(name):
    fn = FakeJit(compiles=False)  # the interpreter returns no kernel
    launch = _launcher(name, fn)
    x = torch.zeros(8)
    for _ in range(3):
        launch((1,), "plan", (x, 3, 1.0), dict(BLOCK=8, FLAG=False))
    assert kinds(fn.log) == ["jit"] * 3


def test_plan_numbers_stay_unique_when_the_plan_cache_starts_over(monkeypatch):
    """The launch cache keys on a plan's number: a number reused for another plan after the plan
    cache was cleared would launch code compiled for other constexprs."""
    dec = importlib.import_module("kernels.fa4_decode.baseline")
    pre = importlib.import_module("kernels.fa4_prefill.baseline")
    cpu = torch.device("cpu")
    for mod, make in ((dec, lambda s: dec._plan(dict(dec.CONFIG), 2, 4, 256, 128, 1, 2, 3, cpu, s)),
                      (pre, lambda s: pre._plan(dict(pre.CONFIG), 70, 4, 256, 64, 1, 1, True, s, cpu))):
        monkeypatch.setattr(mod, "_PLANS_MAX", 3)
        monkeypatch.setattr(mod, "_PLANS", {})
        numbers = [make(0.01 * (i + 1))[-1] for i in range(10)]  # 10 plans through a cache of 3
        assert len(set(numbers)) == 10, numbers
        assert make(0.1)[-1] == numbers[-1]  # the live entry is found again, same number


def test_a_callers_key_stands_for_the_arguments():
    """gdn's entry keys a whole call once (sizes, ints, CONFIG, dtypes and alignment of the caller's tensors)
    and hands that key to every launch: the same key hits whatever the tensors, another key misses."""
    get_op("gdn_prefill")
    fn = FakeJit()
    launch = importlib.import_module("kernels.gdn_prefill.baseline")._Launch(fn)
    kw = dict(BLOCK=64, FLAG=True)
    x = torch.zeros(64, dtype=torch.bfloat16)
    launch((1,), (x, 16, 0.5), kw, ("call", 1))
    launch((2,), (torch.ones(64, dtype=torch.bfloat16), 16, 0.5), kw, ("call", 1))
    launch((1,), (x, 16, 0.5), kw, ("call", 2))
    assert kinds(fn.log) == ["jit", "direct", "jit"]


class _RecordingDriver:
    """Stands in for Triton's active driver: records what fill_tma_descriptor* (the descriptor's encoding at
    launch, a GPU call; its name differs between releases) is handed instead of encoding it."""

    def __init__(self):
        self.calls = []
        self.utils = self

    def __getattr__(self, name):
        if not name.startswith("fill_tma_descriptor"):
            raise AttributeError(name)
        return lambda *args: self.calls.append(args) or "map"


def _launcher_view(desc, meta):
    """What Triton's launcher makes of a host descriptor argument (this Triton's make_tensordesc_arg, whose
    arity differs between releases), tensors replaced by their addresses."""
    import inspect

    from triton.backends.nvidia.driver import make_tensordesc_arg

    n = len(inspect.signature(make_tensordesc_arg).parameters)
    out = make_tensordesc_arg(desc, meta) if n == 2 else make_tensordesc_arg(desc, meta, None)
    return [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in out]


@pytest.mark.parametrize("meta", [None, dict(swizzle=3, elem_size=2, elem_type=5, block_size=[64, 128],
                                             fp4_padded=False)])
def test_the_light_gluon_descriptor_launches_as_the_validated_one(meta, monkeypatch):
    """gdn's warm Gluon launches pass _WsDesc (no dataclass validation, no view) where the first launch of the
    key passed a validated TensorDescriptor: Triton's launcher must read the same base, shape, strides and
    options from both, with and without the compiled kernel's descriptor metadata."""
    from triton.runtime import driver as drv

    get_op("gdn_prefill")
    mod = importlib.import_module("kernels.gdn_prefill.baseline")
    x = torch.zeros(200, 3, 128, dtype=torch.bfloat16)
    real, light = mod._ws_desc(x, 128, 64), mod._WsDesc(x, 128, 64)
    assert (light.shape, light.strides, light.block_shape) == (real.shape, real.strides, real.block_shape)
    assert light.layout is real.layout and light.padding == real.padding
    fake = _RecordingDriver()
    monkeypatch.setattr(drv, "_active", fake)  # what driver.active returns (a CPU machine has no driver)
    assert _launcher_view(light, meta) == _launcher_view(real, meta)
    assert len(fake.calls) == (0 if meta is None else 2) and fake.calls[0:1] == fake.calls[1:2]
