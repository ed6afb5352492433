"""aka.launch: a warm launch goes to Triton's C launcher with what Triton's runner would hand it, or to the
runner wherever the kept path cannot stand in for it. Fakes stand in for a compiled kernel and the driver (no
GPU here); the device test (tests/evaluate/test_gpu_timing.py) checks the kept path on real kernels."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
from triton.backends.nvidia import driver as nvidia

from aka import launch as kl
from aka.evaluate.host import launches

LAYOUT = "iiiKKppOOOOOO"  # Triton 3.6's leading C-launcher arguments, the layout aka.launch speaks


class CFunction:
    """Triton's C launch function (a builtin: no closure), recording what it is handed."""

    def __init__(self, log):
        self.log = log

    def __call__(self, *args):
        self.log.append(("raw", args))


class FakeRun:
    """A CudaLauncher: launch is the C function, or Triton's closure around it."""

    launch_cooperative_grid = False
    launch_pdl = False

    def __init__(self, log, scratch=0, wrap=False):
        self.global_scratch_size = scratch
        self.profile_scratch_size = 0

        launcher = CFunction(log)
        if wrap:  # wrap_handle_tensordesc's shape: inner(*args) closing over `launcher`
            def inner(*args):
                return launcher(*args)

            self.launch = inner
        else:
            self.launch = launcher


class FakeSrc:
    def __init__(self, signature):
        self.signature = signature


class FakeMeta:
    def __init__(self, descs):
        self.tensordesc_meta = descs


class FakeCompiled:
    packed_metadata = ("packed",)
    function = 1234
    name = "_k"

    def __init__(self, log, signature, descs=None, scratch=0):
        self.log = log
        self.src = FakeSrc(signature)
        self.metadata = FakeMeta(descs)
        self.run = FakeRun(log, scratch, wrap=any(str(s).startswith("tensordesc") for s in signature.values()))

    def __getitem__(self, grid):
        return lambda *args: self.log.append(("runner", grid, args))


class FakeJit:
    """A @jit function: its parameters (Triton's KernelParam has .name and .default) and what it compiles.
    defaults: parameter name -> its default value."""

    def __init__(self, arg_names, signature, descs=None, scratch=0, defaults=None):
        defaults = defaults or {}
        self.arg_names = arg_names
        self.params = [SimpleNamespace(name=n, default=defaults.get(n, inspect.Parameter.empty)) for n in arg_names]
        self.log = []
        self.compiled = FakeCompiled(self.log, signature, descs, scratch)

    def __getitem__(self, grid):
        def jit(*args, **kw):
            self.log.append(("jit", grid, args))
            return self.compiled

        return jit


class FakeUtils:
    def __init__(self):
        self.fills = []

    def fill_tma_descriptor(self, *args):
        self.fills.append(args)
        return ("map", len(self.fills))


class FakeDriver:
    def __init__(self):
        self.utils = FakeUtils()

    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return 777


@pytest.fixture
def triton36(monkeypatch):
    """Triton 3.6's launcher layout and a fake active driver (a CPU machine has none)."""
    from triton.runtime import driver as drv

    monkeypatch.setattr(nvidia, "_BASE_ARGS_FORMAT", LAYOUT, raising=False)
    fake = FakeDriver()
    monkeypatch.setattr(drv, "_active", fake)
    return fake


SIG = {"x": "*bf16", "n": "i32", "BLOCK": "constexpr"}


def test_a_warm_launch_hands_the_c_launcher_what_the_runner_would(triton36):
    fn = FakeJit(["x", "n", "BLOCK"], SIG)
    launcher = kl.Launcher(fn)
    x = torch.zeros(8)
    launcher((2, 3), (x, 5), dict(BLOCK=64, num_warps=4))
    launcher((4,), (x, 5), dict(BLOCK=64, num_warps=4))
    assert [e[0] for e in fn.log] == ["jit", "raw"]
    args = fn.log[1][1]
    # grid (padded to three axes), stream, function, cooperative, PDL, no scratch, packed metadata, no launch
    # metadata and no hooks, then every parameter in order, constexprs included
    assert args == (4, 1, 1, 777, 1234, False, False, None, None, ("packed",), None, None, None, x, 5, 64)
    assert launcher.kept_calls == 1


def test_a_parameter_left_to_its_default_is_launched_with_the_default(triton36):
    """A constexpr the caller does not pass (the Triton merge kernel's SKIP_ONE off the Gluon path) goes to the C
    launcher with its default, as the JIT bound it: a KeyError here took the whole call down on an H100."""
    fn = FakeJit(["x", "n", "BLOCK", "SKIP"], {**SIG, "SKIP": "constexpr"}, defaults={"SKIP": False})
    launcher = kl.Launcher(fn)
    x = torch.zeros(8)
    launcher((1,), (x, 5), dict(BLOCK=64))
    launcher((1,), (x, 5), dict(BLOCK=64))
    assert fn.log[-1][0] == "raw" and fn.log[-1][1][-4:] == (x, 5, 64, False) and launcher.kept_calls == 1


def test_the_runner_launches_where_the_kept_path_cannot_stand_in(triton36, monkeypatch):
    from triton import knobs

    x = torch.zeros(8)
    scratch = FakeJit(["x", "n", "BLOCK"], SIG, scratch=128)  # the runner allocates scratch per launch
    launcher = kl.Launcher(scratch)
    launcher((1,), (x, 5), dict(BLOCK=64))
    launcher((1,), (x, 5), dict(BLOCK=64))
    assert scratch.log[-1][0] == "runner" and launcher.kept_calls == 0

    hooked = FakeJit(["x", "n", "BLOCK"], SIG)
    launcher = kl.Launcher(hooked)
    launcher((1,), (x, 5), dict(BLOCK=64))
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda meta: None)  # a profiler
    launcher((1,), (x, 5), dict(BLOCK=64))
    assert hooked.log[-1][0] == "runner"

    monkeypatch.setattr(nvidia, "_BASE_ARGS_FORMAT", "another layout", raising=False)
    other = FakeJit(["x", "n", "BLOCK"], SIG)
    launcher = kl.Launcher(other)
    launcher((1,), (x, 5), dict(BLOCK=64))
    launcher((1,), (x, 5), dict(BLOCK=64))
    assert other.log[-1][0] == "runner"


def test_another_key_compiles_again(triton36):
    fn = FakeJit(["x", "n", "BLOCK"], SIG)
    launcher = kl.Launcher(fn)
    buf = torch.zeros(16, dtype=torch.bfloat16)
    launcher((1,), (buf[:8], 16), dict(BLOCK=64))
    launcher((1,), (buf[1:9], 16), dict(BLOCK=64))  # 2-byte offset: Triton specialises on 16-byte alignment
    launcher((1,), (buf[:8], 1), dict(BLOCK=64))  # an int Triton keys on (== 1)
    launcher((1,), (buf[:8], 16), dict(BLOCK=32))
    assert [e[0] for e in fn.log] == ["jit"] * 4
    launcher((1,), (buf[:8], 16), dict(BLOCK=64))
    assert fn.log[-1][0] == "raw"


class Desc:
    """A host TensorDescriptor's fields, as Triton's launcher reads them."""

    padding = "zero"

    def __init__(self, base, box):
        self.base = base
        self.shape = list(base.shape)
        self.strides = list(base.stride())
        self.block_shape = list(box)


def triton36_expansion(desc, meta, fill) -> list:
    """What Triton 3.6's make_tensordesc_arg hands its C launcher for a host descriptor (the release whose
    launcher layout aka.launch speaks; this machine's Triton may be another), tensors as addresses."""
    shape, strides = list(desc.shape), list(desc.strides)
    if meta is None:
        return _addresses([desc.base, *shape, *strides, desc.padding == "nan", *shape, *strides])
    dtype = nvidia.TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]]
    m = fill(desc.base.data_ptr(), meta["swizzle"], meta["elem_size"], dtype, meta["block_size"], shape, strides,
             1 if desc.padding == "nan" else 0)
    return [m, *shape, *strides]


def _addresses(args) -> list:
    return [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]


META = dict(swizzle=3, elem_size=2, elem_type=5, block_size=[64, 128], fp4_padded=False)


def test_a_descriptors_tensor_map_is_kept_per_address_and_matches_tritons(triton36):
    sig = {"d": "tensordesc<bf16[64, 128]>", "n": "i32"}
    fn = FakeJit(["d", "n"], sig, descs=[META])
    launcher = kl.Launcher(fn)
    a, b = torch.zeros(256, 128, dtype=torch.bfloat16), torch.zeros(256, 128, dtype=torch.bfloat16)
    da = Desc(a, (64, 128))
    launcher((1,), (da, 3), {})  # the JIT's launch: Triton encodes its own map
    fills = triton36.utils.fills
    launcher((1,), (da, 3), {})
    launcher((1,), (Desc(a, (64, 128)), 3), {})  # the same address and geometry: the kept map
    assert len(fills) == 1
    launcher((1,), (Desc(b, (64, 128)), 3), {})  # another address: encoded once more
    assert len(fills) == 2
    # the map and the sizes after it are what Triton's own wrapper hands the C launcher for that descriptor
    want = triton36_expansion(Desc(b, (64, 128)), META, triton36.utils.fill_tma_descriptor)
    assert len(fills) == 3 and fills[1] == fills[2]
    assert list(fn.log[-1][1][13:]) == [("map", 2), *want[1:], 3]


def test_a_descriptor_without_a_tensor_map_expands_as_tritons(triton36):
    sig = {"d": "tensordesc<bf16[64, 128]>", "n": "i32"}
    fn = FakeJit(["d", "n"], sig, descs=None)
    launcher = kl.Launcher(fn)
    d = Desc(torch.zeros(256, 128, dtype=torch.bfloat16), (64, 128))
    launcher((1,), (d, 3), {})
    launcher((1,), (d, 3), {})
    assert _addresses(fn.log[-1][1][13:]) == [*triton36_expansion(d, None, None), 3]
    assert not triton36.utils.fills


def test_the_gate_counts_kept_launches(triton36):
    """The gate names a candidate's own kernels from the launches it records; the kept path bypasses the
    runner's wrappers, so it reports each launch to the recorder itself."""
    fn = FakeJit(["x", "n", "BLOCK"], SIG)
    launcher = kl.Launcher(fn)
    x = torch.zeros(8)
    launcher((1,), (x, 5), dict(BLOCK=64))
    with launches.Recorder() as rec:
        launcher((1,), (x, 5), dict(BLOCK=64))
        launcher((1,), (x, 5), dict(BLOCK=64))
    assert rec.launches.triton == {"_k": 2}
    assert fn.log[-1][0] == "raw"


# ---------------------------------------------------------------------------------------------
# on the device (scripts/device/gpu_tests.sh): real kernels through the kept path


def _launchers(mod) -> list:
    """A kernel module's Launchers (gdn's stages hold them directly, fa4's _Launch wraps one as .kept)."""
    out = []
    for v in vars(mod).values():
        v = getattr(v, "kept", v)
        if isinstance(v, kl.Launcher):
            out.append(v)
    return out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("op_name,shape,kernel", [
    ("gdn_prefill", "G5", None), ("gdn_prefill", "G1", None), ("gdn_prefill", "G7", None),
    ("fa4_prefill", "P1", None), ("fa4_prefill", "P6", None),
    ("fa4_decode", "D2-q1", None), ("fa4_decode", "D2-q4", "auto"), ("fa4_decode", "D7-q1", "auto")])
def test_a_kernel_through_the_kept_path_equals_the_runners_result(op_name, shape, kernel, monkeypatch):
    """The ops' launches (gdn: prep, CP, the Gluon forward with five TMA descriptors; fa4_prefill: the Gluon
    or Triton attention kernel; fa4_decode: the Triton split and merge kernels, and with CONFIG kernel "auto"
    the persistent Gluon kernel and the Triton merge) take the kept path once warm, and give bit for bit what
    Triton's runner gives on the same inputs (G1: context parallelism, G7: initial states)."""
    from triton import knobs

    from aka.contract.ops import get_op, load_module

    op = get_op(op_name)
    mod = load_module(op.path("baseline"))
    if kernel:
        monkeypatch.setitem(mod.CONFIG, "kernel", kernel)
    fn = getattr(mod, op.spec.entry)
    case = next(c for c in op.cases("full") if c.id == shape)
    x = op.inputs.make_inputs(case, 0, "cuda")
    fn(**x)  # the JIT's launches
    before = {id(launch): launch.kept_calls for launch in _launchers(mod)}
    out = fn(**x)
    kept = [t.clone() for t in (out if isinstance(out, (tuple, list)) else [out])]
    torch.cuda.synchronize()
    taken = [launch for launch in _launchers(mod) if launch.kept_calls > before[id(launch)]]
    assert taken, "no launch took the kept path"
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda meta: None)  # a hook: the runner launches
    out = fn(**x)
    runner = out if isinstance(out, (tuple, list)) else [out]
    torch.cuda.synchronize()
    assert len(kept) == len(runner) and all(torch.equal(a, b) for a, b in zip(kept, runner))
    if op_name == "gdn_prefill":
        assert len(taken) >= 2, [launch.fn.__name__ for launch in taken]  # prep and forward at least
