# ruff: noqa: E501  (the edits quote baseline lines verbatim)
"""The red team: wrong, cheating and escaping kernels, each with the check that must reject it.

Most are *mutants*: one plausible bug or cheat applied to an op's own baseline (a list of
search/replace edits, each of which must match the baseline exactly once, and optional code
after the imports), so they stay realistic and follow the baseline as it changes. The rest are
files in adversarial/. ``cls`` names the escape class of docs/gate.md; ``shapes`` is what the CPU
test runs (the cheapest shapes that must catch it; scripts/red_team.py runs smoke+edge, and the
full set on a GPU); ``where`` is "gate" (``aka check``) or "screen" (the gate passes; the timing's
own checks reject it); ``policy`` False runs the candidate past the static policy, to prove the
run-time checks alone reject it (``refused`` is then what the policy says of it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent / "adversarial"
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Kernel:
    id: str
    op: str
    cls: str
    expect: str  # regex searched in the rejection reason
    stage: str = "check"
    shapes: str = "smoke,edge"
    base: str = ""  # "baseline": a mutant of the op's baseline; "adv:NAME": of adversarial/NAME.py; "": adversarial/<id>.py
    edits: tuple[tuple[str, str], ...] = ()
    prologue: str = ""
    policy: bool = True
    refused: str = ""  # with policy=False: what the static policy says of it (regex)
    where: str = "gate"
    gpu_only: bool = False
    rounds: int = 2  # aka check --rounds: 3 reaches the third input variant of a shape
    doc: str = ""


def source_of(k: Kernel) -> str:
    """The kernel's source: the file, or the baseline with the edits applied (each exactly once)."""
    if not k.base:
        return (HERE / f"{k.id}.py").read_text()
    if k.base.startswith("adv:"):
        src = (HERE / f"{k.base[4:]}.py").read_text()
    elif k.base == "promoted":  # the shipped kernel: promoted.py, baseline.py with promoted.json's values, or baseline.py
        from aka.contract.ops import get_op

        src = get_op(k.op, ROOT).default_kernel().read_text()
    else:  # the baseline through the op: one written as stage files is rendered first
        from aka.contract.ops import get_op

        src = get_op(k.op, ROOT).path(k.base).read_text()
    for search, replace in k.edits:
        n = src.count(search)
        if n != 1:
            raise AssertionError(f"{k.id}: edit matches the {k.op} {k.base} {n} times, not once: {search[:60]!r}")
        src = src.replace(search, replace)
    if k.prologue:
        anchor = "import triton.language as tl\n" if not k.base.startswith("adv:") else "import torch as t\n"
        assert src.count(anchor) == 1, f"{k.id}: no single '{anchor.strip()}' line to put the prologue after"
        src = src.replace(anchor, anchor + "\n" + k.prologue.strip("\n") + "\n")
    return f"# red team {k.id} ({k.cls}): {k.doc}\n" + src


def materialise(k: Kernel, folder: Path) -> Path:
    path = folder / f"{k.op}__{k.id}.py"
    path.write_text(source_of(k))
    return path


# ---------------------------------------------------------------------------------------------
# shared cheats (module-level code a mutant adds)

_COUNT_CALLS = '''
_CALLS = {}


def _nth_call(q):
    key = tuple(q.shape)
    _CALLS[key] = _CALLS.get(key, 0) + 1
    return _CALLS[key]
'''

_PTR_CACHE = '''
_MEMO = {}
'''

_FRAMES = '''
import dataclasses


def _in_gate():
    def probe():
        yield dataclasses.sys._getframe(1)  # the frame that resumed the generator: the caller's
    f = next(probe())
    while f is not None:
        if f.f_code.co_name in ("_call", "run_round", "gate_worker"):
            return True
        f = f.f_back
    return False
'''

_PATCH_CHECKER = '''
import dataclasses


def _patch_checker():
    mods = dataclasses.sys.modules
    checks = mods.get("aka.evaluate.checker.gate_checks")
    if checks is None:
        return
    ok = checks.OutputCheck
    for name in ("aka.evaluate.checker.gate_checks", "aka.evaluate.checker.gate"):
        m = mods.get(name)
        if m is not None and hasattr(m, "check_output"):
            m.check_output = lambda name, *a, **k: ok(name=name, ok=True)


_patch_checker()
'''

_PATCH_MASK = '''
import typing

_T = typing.sys.modules["torch"].Tensor
_T.masked_fill = lambda self, mask, value: self  # a reference in this process would lose its causal mask
'''

_PATCH_NAN = '''
import dataclasses

_torch = dataclasses.sys.modules["torch"]
_torch.isnan = lambda t: _torch.zeros_like(t, dtype=_torch.bool)
_torch.isfinite = lambda t: _torch.ones_like(t, dtype=_torch.bool)
_torch.allclose = lambda *a, **k: True
_torch.Tensor.isnan = _torch.isnan
'''

_THREAD = '''
import dataclasses

_threading = dataclasses.sys.modules.get("threading") or __import__("threading")


def _keep_patching():
    import time
    end = time.time() + 120
    while time.time() < end:
        for name in ("aka.evaluate.checker.gate_checks", "aka.evaluate.checker.gate", "aka.evaluate.checker.verify"):
            m = dataclasses.sys.modules.get(name)
            if m is not None and hasattr(m, "error_metrics"):
                m.error_metrics = lambda out, ref: (0.0, 0.0)
        time.sleep(0.01)


_threading.Thread(target=_keep_patching, daemon=True).start()
'''

_PATCH_DRAW = '''
import dataclasses

for _name in ("aka.evaluate.checker.gate", "aka.evaluate.host.main"):
    _m = dataclasses.sys.modules.get(_name)
    if _m is not None and hasattr(_m, "draw_scalars"):
        _m.draw_scalars = lambda *a, **k: {}  # an in-process gate would never vary the scale
'''

_TIMER = '''
import dataclasses

_torch = dataclasses.sys.modules["torch"]
_torch.cuda.Event.elapsed_time = lambda self, end: 1e-4  # every timing in this process reads 0.1 µs
'''

_ARGV = '''
import dataclasses


def _gate_argv():
    return "aka.evaluate.checker.gate:gate_worker" in " ".join(dataclasses.sys.argv)
'''

# ---------------------------------------------------------------------------------------------
# fa4_decode

# The entry (kernels/fa4_decode/stages/entry.py) hands each call to the Triton or the Gluon kernels; mutants of the
# whole op edit the entry, on the Triton hand-off (CONFIG "kernel" defaults to "triton", so it holds on every device)
_DEC_ENTRY = "    cfg = CONFIG\n"
_DEC_CALL = "    return _triton_forward(q, k_cache, v_cache, page_table, kv_lens, softmax_scale, cfg)\n"
_DEC_SCALE = (_DEC_ENTRY, _DEC_ENTRY + "    softmax_scale = None  # ignores the caller's scale\n")
# CONFIG pins for mutants of a path today's CONFIG does not take on their shapes: the pointer gather
# (the default loads K/V through TMA) and the 32-key blocks under which E6 has more splits than one
# merge step and E7 a split in which a draft row sees no key
_DEC_GATHER = ('    "USE_TMA": True,', '    "USE_TMA": False,')
_DEC_BN32 = ('    "BLOCK_N": 64,', '    "BLOCK_N": 32,')
_DEC_NO_MAX = ("            m_new = tl.maximum(m_i, m_blk)\n            p = tl.math.exp2(qk * qk_scale - m_new[:, None])",
               "            m_new = m_i * 0.0\n            p = tl.math.exp2(qk * qk_scale - m_new[:, None])")

# torch_attention_ops.py's attention handed to aka.launch.Launcher as a fake JIT function whose "compiled
# kernel" is the candidate's own callable
_THROUGH_LAUNCHER = (
    ("import torch\n", "import torch\n\nfrom aka.launch import Launcher\n"),
    ("def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):\n",
     "def _attention(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):\n"),
    ("    return o\n", """    return o


class _Kernel:
    packed_metadata = ()
    arg_names = ["q", "k_cache", "v_cache", "page_table", "kv_lens", "softmax_scale"]

    def __getitem__(self, grid):
        return self

    def __call__(self, *args):
        _OUT.append(_attention(*args))
        return self


_OUT = []
_LAUNCH = Launcher(_Kernel())


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    _LAUNCH((1,), (q, k_cache, v_cache, page_table, kv_lens, softmax_scale), {})
    return _OUT.pop()
"""),
)

DECODE = [
    Kernel("ignores_scale", "fa4_decode", "scalars never varied", r"^S1: round 1 \((mixed; )?(softmax_)?scale=[0-9.]+\): o: (rel L2|max element)",
           base="baseline", edits=(_DEC_SCALE,), shapes="S1", doc="always uses 256**-0.5"),
    Kernel("reads_page_tail", "fa4_decode", "finite page garbage", r"o: NaN/Inf",
           base="baseline", shapes="S1",
           edits=(("        n_ok = offs_n < n_end\n        if USE_TMA:",
                   "        n_ok = offs_n < ((n_end + PAGE - 1) // PAGE) * PAGE  # whole pages\n"
                   "        if USE_TMA:"),),
           doc="loads whole pages: the rows past kv_len enter with a zero weight"),
    Kernel("unmasked_v_page0", "fa4_decode", "finite page garbage", r"o: NaN/Inf", base="baseline", shapes="S1",
           edits=(("            v = tl.load(V + (page * stride_vp + (offs_n % PAGE) * stride_vs + v_off)[:, None]"
                   " + offs_d[None, :],\n                        mask=n_ok[:, None], other=0.0)",
                   "            v = tl.load(V + (page * stride_vp + (offs_n % PAGE) * stride_vs + v_off)[:, None]"
                   " + offs_d[None, :])"), _DEC_GATHER),
           doc="V loads unmasked: masked page-table slots fall back to page 0, weighted by p = 0"),
    Kernel("tma_v_unzeroed", "fa4_decode", "finite page garbage", r"o: NaN/Inf", base="baseline", shapes="S1",
           edits=(("            v = tl.where(n_ok[:, None], v_desc.load([row, kvh * HEAD_D]), 0.0)",
                   "            v = v_desc.load([row, kvh * HEAD_D])"),),
           doc="TMA V boxes kept whole: the rows past the split's end (a NaN page tail) meet p = 0"),
    Kernel("no_max_subtraction", "fa4_decode", "overflow", r"^E8: round 0: o: NaN/Inf", base="baseline", edits=(_DEC_NO_MAX,),
           shapes="E8", doc="softmax without its running max: exp overflows on large scores"),
    Kernel("merge_one_step", "fa4_decode", "more splits than one merge step", r"^E6: round 0: o: (rel L2|max element)",
           base="baseline", shapes="E6",
           edits=(("    for s0 in range(0, n_splits, BLOCK_S):", "    for s0 in range(0, tl.minimum(n_splits, BLOCK_S), BLOCK_S):"),
                  _DEC_BN32),
           doc="merges only the first REDUCE_BLOCK_S splits"),
    Kernel("empty_draft_split", "fa4_decode", "empty draft window", r"^E7: round 0: o: (NaN/Inf|rel L2)",
           base="baseline", shapes="E7",
           edits=(("\n    has = l_i > 0.0  # a draft row can see no key of a late split", "\n    has = l_i > -1.0"), _DEC_BN32),
           doc="divides by l = 0 for a draft row that sees no key of a split"),
    Kernel("drafts_see_all", "fa4_decode", "wrong maths", r"^S2: round 0: o: (rel L2|max element)", base="baseline",
           shapes="S2",
           edits=(("        qk = tl.where((offs_n[None, :] <= qpos[:, None]) & n_ok[None, :], qk, float(\"-inf\"))",
                   "        qk = tl.where(n_ok[None, :], qk, float(\"-inf\"))"),),
           doc="no causal mask among the q_len drafts"),
    Kernel("gqa_ignores_kv_head", "fa4_decode", "wrong maths", r"^S2: round 0: o: (rel L2|max element|NaN/Inf)",
           base="baseline", shapes="S2",
           edits=(("    head = kvh * G + offs_m % G", "    head = offs_m % G"),), doc="query heads of KV head 0 only"),
    Kernel("counts_calls", "fa4_decode", "call counting", r"timed output wrong", base="baseline", where="screen",
           prologue=_COUNT_CALLS,
           edits=(("    o = torch.empty_like(q)\n    if split_kw[\"USE_TMA\"]:",
                   "    o = torch.empty_like(q)\n    if _nth_call(q) > 3:\n        return o.zero_()\n    if split_kw[\"USE_TMA\"]:"),),
           doc="right for the gate's calls, zeros from the 4th call of a shape on"),
    Kernel("caches_by_pointer", "fa4_decode", "input caching", r"^S1: round 1 .*o: shares storage with an earlier "
           r"call's output 'o'", base="baseline", prologue=_PTR_CACHE,
           edits=((_DEC_ENTRY, "    key = (q.data_ptr(), k_cache.data_ptr(), tuple(q.shape))\n    if key in _MEMO:\n"
                               "        return _MEMO[key]\n" + _DEC_ENTRY),
                  (_DEC_CALL, _DEC_CALL.replace("    return ", "    o = ") + "    _MEMO[key] = o\n    return o\n")),
           doc="memoises by buffer address: free on repeated buffers"),
    Kernel("detects_gate_by_frames", "fa4_decode", "gate detection", r"timed output wrong", base="baseline",
           where="screen", policy=False, refused=r"attribute '\.gi_frame'|dataclasses", prologue=_FRAMES,
           edits=(("    o = torch.empty_like(q)\n    if split_kw[\"USE_TMA\"]:",
                   "    o = torch.empty_like(q)\n    if not _in_gate():\n        return o.zero_()\n    if split_kw[\"USE_TMA\"]:"),),
           doc="walks the stack for the gate's frames; zeros when timed"),
    Kernel("patches_checker", "fa4_decode", "in-process patching", r"^S1: round 0: o: all zeros", base="baseline",
           policy=False, refused=r"'dataclasses\.sys\.modules' is not allowed", prologue=_PATCH_CHECKER,
           shapes="S1", edits=(("    o = torch.empty_like(q)\n    if split_kw[\"USE_TMA\"]:",
                                "    o = torch.zeros_like(q)\n    _patch_checker()\n    return o\n    if split_kw[\"USE_TMA\"]:"),),
           doc="replaces aka.evaluate.checker.gate_checks.check_output with one that passes; returns zeros"),
    Kernel("patches_isnan", "fa4_decode", "in-process patching", r"^E8: round 0: o: NaN/Inf", base="baseline",
           policy=False, refused=r"'dataclasses\.sys\.modules' is not allowed", prologue=_PATCH_NAN,
           edits=(_DEC_NO_MAX,), shapes="E8", doc="overflows to NaN and makes torch.isnan/isfinite/allclose lie"),
    Kernel("thread_after_call", "fa4_decode", "in-process patching", r"^S1: round 1 \((mixed; )?(softmax_)?scale=[0-9.]+\): o: (rel L2|max element)",
           base="baseline", policy=False, refused=r"'dataclasses\.sys\.modules'|'__import__'", prologue=_THREAD,
           edits=(_DEC_SCALE,), shapes="S1",
           doc="a thread that keeps replacing the checker's error metric with zeros after the call returns"),
    Kernel("detects_gate_by_argv", "fa4_decode", "gate detection", r"^S1: round 0: o: all zeros", base="baseline",
           policy=False, refused=r"'dataclasses\.sys\.argv' is not allowed", prologue=_ARGV, shapes="S1",
           edits=(("    o = torch.empty_like(q)\n    if split_kw[\"USE_TMA\"]:",
                   "    o = torch.empty_like(q)\n    if not _gate_argv():\n        return o.zero_()\n    if split_kw[\"USE_TMA\"]:"),),
           doc="correct only when argv names the gate worker (the gate ran in the candidate's process)"),
    Kernel("patches_timer", "fa4_decode", "timer tampering", r"suspect: .*speed of light", base="baseline",
           where="screen", policy=False, refused=r"'dataclasses\.sys\.modules' is not allowed", prologue=_TIMER,
           gpu_only=True, doc="a correct kernel that makes CUDA events read 0.1 µs (the floor catches the lie)"),
    Kernel("torch_attention_ops", "fa4_decode", "torch compute", r"computed with torch outside its kernels",
           shapes="S1", doc="the whole attention in plain torch operators (the policy cannot see operators)"),
    Kernel("launcher_hides_torch", "fa4_decode", "torch compute", r"computed with torch outside its kernels",
           base="adv:torch_attention_ops", shapes="S1", edits=_THROUGH_LAUNCHER,
           doc="the attention in torch operators, run as a 'kernel' through aka.launch.Launcher (the one part "
               "of aka a candidate may import: it must not carry work past the run-time launch check)"),
]

# ---------------------------------------------------------------------------------------------
# fa4_prefill

# The entry hands each call to one of two kernels (kernels/fa4_prefill/stages/entry.py): mutants of the whole op
# edit that hand-off, so they hold on every device; mutants of the Triton kernel also pin CONFIG "kernel" to
# "triton", so that on an sm_90 GPU (where "auto" runs the Gluon kernel) they still run the code they mutate.
_PRE_CALL = "    return forward(q, k_cache, v_cache, page_table, cu_seqlens_q, kv_lens, softmax_scale, cfg)\n"
_PRE_SCALE = (_PRE_CALL, _PRE_CALL.replace("softmax_scale, cfg)", "None, cfg)  # ignores the caller's scale"))
_PRE_TRITON = ('    "kernel": "auto",', '    "kernel": "triton",')

PREFILL = [
    Kernel("ignores_scale", "fa4_prefill", "scalars never varied", r"^S1: round 1 \((mixed; )?(softmax_)?scale=[0-9.]+\): o: (rel L2|max element)",
           base="baseline", edits=(_PRE_SCALE,), shapes="S1", doc="always uses 256**-0.5"),
    Kernel("no_max_subtraction", "fa4_prefill", "overflow", r"^E6: round 0: o: NaN/Inf", base="baseline", shapes="E6",
           edits=(_PRE_TRITON, ("    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)", "    m_new = m_i * 0.0")),
           doc="softmax without its running max"),
    Kernel("causal_off_by_one", "fa4_prefill", "wrong maths", r"^S1: round 0: o: (rel L2|max element|NaN/Inf)",
           base="baseline", shapes="S1",
           edits=(_PRE_TRITON,
                  ("        qk = tl.where(offs_n[None, :] <= qpos[:, None], qk, float(\"-inf\"))",
                   "        qk = tl.where(offs_n[None, :] <= qpos[:, None] + 1, qk, float(\"-inf\"))"),),
           doc="each query also sees the next key"),
    Kernel("ignores_prefix", "fa4_prefill", "wrong maths", r"^S2: round 0: o: (rel L2|max element|NaN)",
           base="baseline", shapes="S2",
           edits=(_PRE_TRITON, ("    kv_len = tl.load(KVL + s)\n    prefix = kv_len - q_len\n",
                                "    kv_len = tl.load(KVL + s)\n    prefix = kv_len * 0\n")),
           doc="positions counted from 0, not after the cached prefix"),
    Kernel("reads_page_tail", "fa4_prefill", "finite page garbage", r"o: NaN/Inf", base="baseline", shapes="S1",
           edits=(_PRE_TRITON, ("            v = tl.where(n_ok[:, None], v, 0.0)\n", ""),
                  ("            v = tl.load(V + (page * stride_vp + (offs_n % PAGE) * stride_vs + v_off)[:, None] + offs_d[None, :],\n"
                   "                        mask=kv_mask, other=0.0)",
                   "            v = tl.load(V + (page * stride_vp + (offs_n % PAGE) * stride_vs + v_off)[:, None] + offs_d[None, :])")),
           doc="V rows past kv_len in the last page enter with weight 0"),
    Kernel("counts_calls", "fa4_prefill", "call counting", r"timed output wrong", base="baseline", where="screen",
           prologue=_COUNT_CALLS,
           edits=((_PRE_CALL, _PRE_CALL.replace("    return forward", "    o = forward")
                   + "    if _nth_call(q) > 3:\n        return o.zero_()\n    return o\n"),),
           doc="right for the gate's calls, zeros from the 4th on"),
    Kernel("patches_masked_fill", "fa4_prefill", "in-process patching", r"^S1: round 0: o: (rel L2|max element|NaN)",
           base="baseline", policy=False, refused=r"'typing\.sys\.modules' is not allowed", prologue=_PATCH_MASK, shapes="S1",
           edits=(_PRE_TRITON,
                  ("        acc, m_i, l_i = _attn_block(acc, m_i, l_i, q, k, v, qk_scale, offs_n, qpos, True)",
                   "        acc, m_i, l_i = _attn_block(acc, m_i, l_i, q, k, v, qk_scale, offs_n, qpos + 1000000, True)"),),
           doc="non-causal attention, with torch's masked_fill made a no-op for an in-process reference"),
    Kernel("patches_scalar_draw", "fa4_prefill", "in-process patching",
           r"^S1: round 1 \(softmax_scale=[0-9.]+\): o: (rel L2|max element)", base="baseline", policy=False,
           refused=r"'dataclasses\.sys\.modules(\.get)?' is not allowed", prologue=_PATCH_DRAW, edits=(_PRE_SCALE,),
           shapes="S1", doc="ignores the scale and turns off aka's scalar draw where it can reach it"),
    Kernel("sdpa_through_typing", "fa4_prefill", "torch compute", r"computed with torch outside its kernels",
           base="adv:torch_attention", policy=False, refused=r"'typing\.sys\.modules' is not allowed", shapes="S1",
           prologue="import typing\n\n_F = typing.sys.modules['torch.nn.functional']\n",
           edits=(("t.nn.functional.scaled_dot_product_attention", "_F.scaled_dot_product_attention"),),
           doc="torch's own attention, reached through typing.sys.modules"),
    Kernel("torch_attention", "fa4_prefill", "torch compute", r"computed with torch outside its kernels",
           policy=False, refused=r"torch\.nn\.functional|\.tril", shapes="S1",
           doc="the existing policy case, past the policy: the run-time launch check rejects it too"),
]

# ---------------------------------------------------------------------------------------------
# gdn_prefill

_GDN_SCALE = ("    scale = K**-0.5 if scale is None else float(scale)\n", "    scale = K**-0.5  # ignores the caller's scale\n")

GDN = [
    Kernel("ignores_scale", "gdn_prefill", "scalars never varied", r"^S1: round 1 \((mixed; )?(softmax_)?scale=[0-9.]+\): o: (rel L2|max element)",
           base="baseline", edits=(_GDN_SCALE,), shapes="S1", doc="always uses 128**-0.5"),
    Kernel("cp_drops_h0", "gdn_prefill", "CP path never run", r"^E7: round (0|1 \(mixed; scale=[0-9.]+\)): (o|final_state): (rel L2|max element)",
           base="baseline", shapes="E7",
           edits=(("HAS_H0=has_h0, WARM=nwarm,", "HAS_H0=False, WARM=nwarm,"),),
           doc="the context-parallel segment transitions leave the initial state out"),
    # in the interpreter the binary search's stray index reads out of bounds and kills the process; on a
    # GPU it reads the wrong sequence's rows (scripts/red_team.py records which)
    Kernel("warm_up_too_short", "gdn_prefill", "CP warm-up truncation", r"^E11: round 0: final_state: (rel L2|max element)",
           base="baseline", shapes="E11",
           edits=(('    "cp_warm_log_decay": -10.0,\n', '    "cp_warm_log_decay": -3.0,\n'),),
           doc="a segment's warm-up stops once its gates decayed by e^-3: 5% of the carried state is dropped"),
    Kernel("fixed_log2_n", "gdn_prefill", "few sequences", r"^E9: .*(died of SIG|(o|final_state): )",
           stage="crash", base="baseline", shapes="E9", edits=(("plan = (seg, split, max(1, int(N).bit_length()) + 1, nt_bound,",
                                                         "plan = (seg, split, 4, nt_bound,"),),
           doc="binary search sized for at most 15 sequences"),
    Kernel("empty_sequence_skipped", "gdn_prefill", "zero-length with h0", r"^E9: round 0: final_state: ",
           base="baseline", shapes="E9",
           edits=(("    o_v = i_v * BV + tl.arange(0, BV)\n    if j == 0:",
                   "    o_v = i_v * BV + tl.arange(0, BV)\n    if L == 0:\n        return\n    if j == 0:"),),
           doc="returns early for an empty sequence: its final state (= h0) is never written"),
    Kernel("head_map_modulo", "gdn_prefill", "wrong maths", r"^E4: round 0: (o|final_state): ", base="baseline",
           shapes="E4", edits=(("    i_hk = i_h // (HV // HK)  # the q/k head value head i_h reads\n", "    i_hk = i_h % HK\n"),),
           doc="value head h reads q/k head h % HK instead of h // (HV/HK), in the output kernel"),
    Kernel("no_state_decay", "gdn_prefill", "wrong maths", r"^S1: round 0: (o|final_state): ", base="baseline",
           shapes="S1", edits=(("    return b_h * tl.exp2(b_gl) + tl.dot(tl.trans(b_kd), b_vd)",
                                "    return b_h + tl.dot(tl.trans(b_kd), b_vd)"),),
           doc="the carried state is not decayed across a chunk"),
    Kernel("counts_calls", "gdn_prefill", "call counting", r"timed output wrong", base="baseline", where="screen",
           prologue=_COUNT_CALLS,
           edits=(("    return forward(q, k, v, g, beta, cu_seqlens, initial_state, scale, CONFIG, cp_segment_chunks)\n",
                   "    o, ht = forward(q, k, v, g, beta, cu_seqlens, initial_state, scale, CONFIG, cp_segment_chunks)\n"
                   "    if _nth_call(q) > 3:\n        o.zero_()\n    return o, ht\n"),),
           doc="right for the gate's calls, zeros from the 4th on"),
    Kernel("scale_in_torch", "gdn_prefill", "torch compute", r"computed with torch outside its kernels: mul",
           base="baseline", shapes="S1",
           edits=(("    return forward(q, k, v, g, beta, cu_seqlens, initial_state, scale, CONFIG, cp_segment_chunks)\n",
                   "    o, ht = forward(q, k, v, g, beta, cu_seqlens, initial_state, 1.0, CONFIG, cp_segment_chunks)\n"
                   "    s = q.shape[-1] ** -0.5 if scale is None else scale\n"
                   "    return (o.float() * s).to(o.dtype), ht\n"),),
           doc="kernels run with scale 1 and torch scales o afterwards (o is linear in the scale)"),
]

# ---------------------------------------------------------------------------------------------
# the classes of issue 37 (2026-12-03), each a mutant of a shipped kernel (promoted.py), each in a path
# or regime the small sets did not reach before

_OUT_CACHE = '''
_OUT = {}
'''

GAPS = [
    Kernel("chain_stops_early", "gdn_prefill", "long-shape path", r"^E8: round \d.*: (o|final_state): (rel L2|max element)",
           base="promoted", shapes="E8",
           edits=(("    for j in range(1, nseg - 1):\n", "    for j in range(1, tl.minimum(nseg - 1, 2)):\n"),),
           doc="the context-parallel chain applies one transition: right while a sequence has at most 3 segments"),
    Kernel("group_as_mask", "fa4_decode", "head layout", r"^E10: round 0: o: ",
           base="promoted", shapes="E10,E11",
           edits=(("    head = kvh * G + offs_m % G\n", "    head = kvh * G + (offs_m & (G - 1))\n"),),
           doc="a packed row's head as offs_m & (G - 1): offs_m % G for groups of 1, 2, 4, 8 and 16, not 3 or 7"),
    Kernel("separable_decay", "gdn_prefill", "input regime", r"^S2: round 2 \(fast; [^)]*\): (o|final_state): (NaN|rel L2|max element)",
           base="promoted", shapes="S1,S2", rounds=3,
           edits=(("    b_a4 = tl.reshape(b_kk * tl.exp2(b_lg) * b_beta[:, None], [4, 16, 4, 16])\n",
                   "    b_a4 = tl.reshape(tl.where(o_t[:, None] > o_t[None, :], b_kk * (tl.exp2(b_gam)[:, None]"
                   " * tl.exp2(-b_gam)[None, :]), 0.0) * b_beta[:, None], [4, 16, 4, 16])\n"),),
           doc="the decay between two rows of a chunk as 2^ga * 2^-gb: inf times 0 once the gates sum below -88"),
    Kernel("reuses_outputs", "gdn_prefill", "aliasing", r"^S1: round 1.*shares storage with an earlier call's output",
           base="promoted", shapes="S1", prologue=_OUT_CACHE,
           edits=(("    o = torch.empty(T, HV, V, dtype=v.dtype, device=dev)\n"
                   "    ht = torch.empty(N, HV, K, V, dtype=torch.float32, device=dev)\n",
                   "    o, ht = _OUT.get((T, HV, V, N), (None, None))\n"
                   "    if o is None:\n"
                   "        o = torch.empty(T, HV, V, dtype=v.dtype, device=dev)\n"
                   "        ht = torch.empty(N, HV, K, V, dtype=torch.float32, device=dev)\n"
                   "        _OUT[(T, HV, V, N)] = (o, ht)\n"),),
           doc="one pair of output buffers per shape, handed to every call: each call right, two held outputs not"),
    Kernel("rotates_outputs", "gdn_prefill", "aliasing", r"^S1: round 2.*shares storage with an earlier call's output",
           base="promoted", shapes="S1", prologue=_OUT_CACHE,
           edits=(("    o = torch.empty(T, HV, V, dtype=v.dtype, device=dev)\n"
                   "    ht = torch.empty(N, HV, K, V, dtype=torch.float32, device=dev)\n",
                   "    pool = _OUT.setdefault((T, HV, V, N), [])\n"
                   "    if len(pool) < 2:\n"
                   "        pool.append((torch.empty(T, HV, V, dtype=v.dtype, device=dev),\n"
                   "                     torch.empty(N, HV, K, V, dtype=torch.float32, device=dev)))\n"
                   "    else:\n"
                   "        pool.append(pool.pop(0))\n"
                   "    o, ht = pool[-1]\n"),),
           doc="two output pairs per shape in turn: two held outputs fine, the third call overwrites the first"),
    # right in the interpreter, which runs programs one at a time (the last to start is the last to
    # finish); on a GPU the last program to start merges while the others still compute their partials
    Kernel("early_ticket", "fa4_decode", "GPU ordering", r"repeat \d+ of \d+ on the same inputs|: o: ",
           base="promoted", shapes="E5,E6", gpu_only=True,
           edits=((" 'FUSED_MERGE': False}", " 'FUSED_MERGE': True}"),
                  ("            return  # empty split: the merge only reads the cdiv(kv_len, chunk) non-empty ones\n",
                   "            return  # empty split: the merge only reads the cdiv(kv_len, chunk) non-empty ones\n"
                   "        if FUSED_MERGE:  # the ticket first, so the merge's loads overlap the others' work\n"
                   "            ticket = tl.atomic_add(CNT + b * tl.num_programs(1) + kvh, 1, sem=\"acq_rel\", scope=\"gpu\")\n"),
                  ("            tl.debug_barrier()\n"
                   "            ticket = tl.atomic_add(CNT + b * tl.num_programs(1) + kvh, 1, sem=\"acq_rel\", scope=\"gpu\")\n",
                   "            tl.debug_barrier()\n")),
           doc="the fused split merge's ticket taken when a program starts, not after its partial is stored"),
]

ALL = DECODE + PREFILL + GDN + GAPS
