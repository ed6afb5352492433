"""Compile statistics: instruction flags from saved PTX/SASS, cuobjdump -res-usage parsing, the
collector on kernels Triton really compiles for sm_90 / sm_80 (no GPU needed to compile), and the
explicit 'unavailable' record in the interpreter."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aka.evaluate.static import compstats
from aka.evaluate.static.compstats import CompileStats, KernelStats, parse_res_usage, ptx_features, sass_features

DATA = Path(__file__).parents[1] / "knowledge" / "data"  # the ncu tests' reports


def test_ptx_flags_from_real_compiler_output():
    sm90 = ptx_features((DATA / "dot_sm90.ptx").read_text())
    assert sm90.has_wgmma and not sm90.has_mma and not sm90.has_tma
    sm80 = ptx_features((DATA / "dot_sm80.ptx").read_text())
    assert sm80.has_mma and not sm80.has_wgmma
    tma = ptx_features((DATA / "tma_sm90.ptx").read_text())
    assert tma.has_tma and not tma.has_wgmma
    assert sm90.local_ldst == 0  # PTX never counts spills


def test_sass_flags_from_real_compiler_output():
    assert sass_features((DATA / "dot_sm90.sass").read_text()).has_wgmma
    sm80 = sass_features((DATA / "dot_sm80.sass").read_text())
    assert sm80.has_mma and not sm80.has_wgmma
    tma = sass_features((DATA / "tma_sm90.sass").read_text())
    assert tma.has_tma and not tma.has_mma


def test_sass_spills_and_cp_async_in_cuobjdump_format():
    f = sass_features((DATA / "spill_cuobjdump.sass").read_text())
    assert f.local_ldst == 3  # STL.64, STL, LDL.64
    assert f.has_mma and f.has_cp_async and not f.has_wgmma and not f.has_tma


def test_res_usage_parsing():
    usage = parse_res_usage((DATA / "res_usage.txt").read_text())
    assert usage["_fwd_kernel"]["REG"] == 255 and usage["_fwd_kernel"]["LOCAL"] == 904
    assert usage["_index_kernel"] == {"REG": 16, "STACK": 0, "SHARED": 0, "LOCAL": 0, "CONSTANT[0]": 568,
                                      "TEXTURE": 0, "SURFACE": 0, "SAMPLER": 0}


def test_interpreter_gives_an_explicit_unavailable_record():
    from aka.contract.ops import get_op, load_module

    op = get_op("gdn_prefill")
    module = load_module(op.path("baseline"))
    cs = compstats.collect(module)  # conftest selected the interpreter
    assert cs == CompileStats(available=False, reason=compstats.INTERPRETER)
    assert compstats.format_table(cs) == [f"compile stats: {compstats.INTERPRETER}"]


def test_nothing_compiled_yet_is_said():
    cs = compstats.collect({"x": 1, "os": os}, interpreter=False)
    assert not cs.available and "no compiled Triton kernels" in cs.reason


def test_by_name_keeps_the_heaviest_specialisation():
    a = KernelStats(name="k", hash="a", n_regs=64)
    b = KernelStats(name="k", hash="b", n_regs=128, n_spills=3)
    assert CompileStats(available=True, kernels=[a, b]).by_name()["k"].hash == "b"


# The collector on kernels Triton really compiles. A child process without TRITON_INTERPRET
# (conftest sets it for this process) compiles for sm_90 and sm_80 and puts the CompiledKernels
# into caches shaped like Triton 3.9's (5-tuple) and 3.6's (4-tuple) device_caches.
CHILD = r'''
import json, sys, types
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from aka.evaluate.static import compstats

@triton.jit
def dot_kernel(a, b, c, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(a + r[:, None] * N + r[None, :])
    y = tl.load(b + r[:, None] * N + r[None, :])
    tl.store(c + r[:, None] * N + r[None, :], tl.dot(x, y))

sig = {"a": "*bf16", "b": "*bf16", "c": "*fp32", "N": "constexpr"}
k90 = triton.compile(ASTSource(dot_kernel, signature=sig, constexprs={"N": 64}),
                     target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 2})
k80 = triton.compile(ASTSource(dot_kernel, signature=sig, constexprs={"N": 32}),
                     target=GPUTarget("cuda", 80, 32), options={"num_warps": 2})

class Jit39:   # device_caches[device] = (kernel_cache, kernel_key_cache, target, backend, binder)
    arg_names = ["a"]
    device_caches = {0: ({"key90": k90}, {}, None, None, None)}
class Jit36:   # (kernel_cache, target, backend, binder)
    arg_names = ["a"]
    device_caches = {0: ({"key80": k80, "pending": object()}, None, None, None)}
class Autotuner:
    fn = Jit36()

found = compstats.find_kernels({"dot": Jit39(), "tuned": Autotuner(), "x": 3, "t": types})
import os
cache = os.environ["TRITON_CACHE_DIR"]
os.environ["TRITON_CACHE_DIR"] = cache + "/serial"  # each read from nothing kept: serial, then side by side
cs = compstats.collect({"dot": Jit39(), "tuned": Autotuner()}, interpreter=False)
os.environ["TRITON_CACHE_DIR"] = cache + "/side"
side = compstats.collect({"dot": Jit39(), "tuned": Autotuner()}, interpreter=False, workers=3)
ref = compstats.res_usage(k90.asm["cubin"])
def unread(*a, **k):
    raise RuntimeError("read again")
compstats.stats_of = unread  # kept by Triton's hash beside its cache: the next collect reads nothing
again = compstats.collect({"dot": Jit39(), "tuned": Autotuner()}, interpreter=False, workers=3)
print(json.dumps({"found": sorted(found), "stats": cs.model_dump(), "side": side.model_dump(),
                  "again": again.model_dump(),
                  "shared90": k90.metadata.shared,
                  "ref90": ref.get("dot_kernel")}))
'''


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    script = tmp_path_factory.mktemp("compile") / "child.py"  # @triton.jit needs a source file
    script.write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton_cache"))  # an empty cache: nothing kept yet
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0 and "ptxas" in out.stderr and "not found" in out.stderr:
        pytest.skip("this Triton build has no ptxas to compile with")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_finds_jit_functions_through_autotuner_wrappers(compiled):
    assert compiled["found"] == ["dot", "tuned"]


def test_collector_reads_both_cache_layouts(compiled):
    stats = CompileStats.model_validate(compiled["stats"])
    assert stats.available
    by_arch = {k.arch: k for k in stats.kernels}
    assert set(by_arch) == {"sm_90", "sm_80"}  # the pending future in the 3.6 cache is skipped
    k90, k80 = by_arch["sm_90"], by_arch["sm_80"]
    assert k90.name == "dot_kernel" and k90.source == "sass"
    assert k90.has_wgmma and not k90.has_mma
    assert k80.has_mma and not k80.has_wgmma
    assert (k90.num_warps, k90.num_stages, k80.num_warps) == (4, 2, 2)
    assert k90.shared_bytes == compiled["shared90"] > 0


def test_kernels_read_side_by_side_read_the_same(compiled):
    assert compiled["side"] == compiled["stats"] and len(compiled["side"]["kernels"]) == 2


def test_statistics_are_kept_by_kernel_hash_beside_the_triton_cache(compiled):
    assert compiled["again"] == compiled["stats"]


def test_registers_match_the_compilers_own_report(compiled):
    k90 = next(k for k in CompileStats.model_validate(compiled["stats"]).kernels if k.arch == "sm_90")
    ref = compiled["ref90"]
    if ref is None:
        pytest.skip("no cuobjdump to read the cubin's resource usage")
    assert k90.regs_from == "cuobjdump"  # never loaded on a device here
    assert k90.n_regs == ref["REG"] and k90.n_regs > 0
    assert k90.n_spills == ref["LOCAL"] // 4


def test_merge_unites_the_split_compile_workers_kernels():
    from aka.evaluate.static.compstats import CompileStats, KernelStats, merge

    a, b = KernelStats(name="_fwd_kernel", hash="aa", n_regs=255), KernelStats(name="_prep_kernel", hash="bb")
    parts = [CompileStats(available=True, kernels=[a]), CompileStats(available=True, kernels=[b, a]),
             CompileStats(available=False, reason="no compiled Triton kernels found")]
    merged = merge(parts)
    assert merged.available and [k.name for k in merged.kernels] == ["_fwd_kernel", "_prep_kernel"]
    assert merge(parts[2:]).reason == "no compiled Triton kernels found" and not merge(parts[2:]).available


def test_kernels_are_read_in_forked_children_and_a_dead_child_loses_none(monkeypatch):
    parent = os.getpid()

    def read(kernel, cuobjdump=None):
        return KernelStats(name=f"k{kernel}", hash=str(os.getpid() != parent))

    monkeypatch.setattr(compstats, "stats_of", read)
    found = [(f"k{i}", i) for i in range(5)]
    side = compstats._read_forked(found, 3)
    assert [k.name for k in side] == [f"k{i}" for i in range(5)] and {k.hash for k in side} == {"True"}

    def dies(kernel, cuobjdump=None):
        if os.getpid() != parent:
            os._exit(3)
        return read(kernel)

    monkeypatch.setattr(compstats, "stats_of", dies)
    assert compstats._read_forked(found, 3) is None
    cs = compstats.collect({}, interpreter=False, workers=3)  # nothing found: nothing forked
    assert not cs.available
