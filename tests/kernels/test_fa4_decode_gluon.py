"""fa4_decode's Gluon path on the CPU: the baseline (rendered from kernels/fa4_decode/stages/) holds a
warp-specialised Gluon split kernel for sm_90a beside its Triton kernels, run by CONFIG kernel "auto" or "gluon".

No GPU here, and Triton's interpreter cannot run Gluon, so:
- the module passes aka's static policy, and its Triton path (what "auto" runs on CPU tensors and in the
  interpreter, and what "triton" always runs) gives the exact output of the single-file baseline it was split
  from (read from git history) and the contract's accuracy on the smoke shapes;
- the dispatch rules ("auto" / "triton" / "gluon", the reasons a call is unfit for Gluon) are checked on
  stand-in tensors that claim to be on an sm_90 GPU;
- the Gluon path's host side (_gluon_forward) runs for real with the Gluon launch replaced by a model of the
  kernel written from its source (block enumeration through the page table and the TMA box coordinates,
  the masks, the base-2 online softmax, the partials) that reads exactly the arguments the launch gets, by
  the kernel's parameter names; the Triton merge kernel then runs in the interpreter on those partials. That
  checks argument order, strides, the split / chunk agreement with the merge and the partial layout, not
  the Gluon code itself: scripts/device/fa4_decode_gluon_compile.py compiles that offline, a GPU runs it.
"""

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
mod = importlib.import_module("kernels.fa4_decode.baseline")
op = get_op("fa4_decode")
# the single-file baseline the stages were split from (c337d69): the Triton path must give its bits
SPLIT_FROM = "c337d69"
PLAIN_RATIO = op.spec.tolerances["o"].plain_ratio
ARGS = ("q", "k_cache", "v_cache", "page_table", "kv_lens")
SMOKE = op.cases("smoke")
# many splits on the short test sequences (chunks of 64 keys), and none
SPLITTY = dict(SPLIT_TARGET=64, MIN_SPLIT_TOKENS=64, REDUCE_BLOCK_S=4)
NOSPLIT = dict(SPLIT_TARGET=1)
BALANCED = dict(SPLITTY, SPLIT_POLICY="balanced")


@pytest.fixture
def config():
    """mod.CONFIG, restored after the test."""
    saved = dict(mod.CONFIG)
    yield mod.CONFIG
    mod.CONFIG.clear()
    mod.CONFIG.update(saved)


def _inputs(sid, seed=0, **change):
    """A contract case's inputs; `change` overrides case parameters (kv_lens, hq, ...)."""
    case = op.cases(sid)[0]
    if change:
        case = case.model_copy(update=change)
    return op.inputs.make_inputs(case, seed, "cpu")


def rel_l2(o, ref):
    return ((o.double() - ref).norm() / ref.norm()).item()


def check_accuracy(o, x):
    """The contract's bound (rel L2 1e-2) and no worse than plain_ratio x a plain bf16 implementation."""
    assert o.shape == x["q"].shape and o.dtype == torch.bfloat16
    assert torch.isfinite(o).all()
    ref = op.reference.reference(**x)[0]
    err = rel_l2(o, ref)
    assert err <= op.spec.tolerances["o"].rel_l2, err
    assert err <= PLAIN_RATIO * rel_l2(op.reference.plain(**x)[0], ref) + 1e-4, err


def _split_from():
    from pre_change import old_baseline

    return old_baseline("fa4_decode", SPLIT_FROM)


def test_module_passes_the_policy_and_declares_its_kernels():
    src = open(mod.__file__).read()
    assert check_source(src, op.spec).violations == []
    # the op's baseline, rendered from its stages; "triton" by default until the Gluon kernel passes a GPU gate
    assert Path(mod.__file__).resolve() == op.path("baseline").resolve()
    assert [Path(s).name for s in op.spec.modules.stages] == ["entry.py", "common.py", "triton_split.py",
                                                              "gluon_split.py"]
    assert mod.CONFIG["kernel"] == "triton" and set(mod.SPACE["kernel"]) == {"auto", "triton", "gluon"}
    for k in ("gluon_stages", "gluon_regs_load"):
        assert mod.CONFIG[k] in mod.SPACE[k], k
    # 4 ring slots would need 32 + 4 x 64 KB of shared memory, past a CTA's 227 KB
    assert set(mod.SPACE["gluon_stages"]) <= {2, 3}
    # the Triton kernels' knobs are the single-file baseline's, at its values
    base = _split_from()
    assert {k: mod.CONFIG[k] for k in base.CONFIG} == base.CONFIG
    assert {k: mod.SPACE[k] for k in base.SPACE} == base.SPACE


@pytest.mark.parametrize("kernel", ["triton", "auto"])
@pytest.mark.parametrize("case", SMOKE, ids=[c.id for c in SMOKE])
def test_smoke_on_the_triton_path_is_the_baseline(config, case, kernel):
    """On CPU tensors in the interpreter both values run the Triton kernels: the single-file baseline's bits,
    and the contract's accuracy against the float64 reference."""
    config["kernel"] = kernel
    x = op.inputs.make_inputs(case, 1, "cpu")
    with Recorder() as rec:
        o = mod.fa4_decode(**x)
    assert set(rec.launches.triton) <= {"_fa4_decode_kernel", "_fa4_decode_merge_kernel"}
    assert rec.launches.triton["_fa4_decode_kernel"] == 1
    assert torch.equal(o, _split_from().fa4_decode(**x))
    check_accuracy(o, x)


def test_auto_in_the_interpreter_is_ruled_out_for_gluon():
    assert mod._INTERPRETED  # this process imported the module under TRITON_INTERPRET=1
    x = _inputs("S1")
    assert mod._gluon_unfit(*(x[a] for a in ARGS)) == "the tensors are not on a CUDA GPU"


@pytest.mark.parametrize("kernel,match", [
    ("Gluon", r"CONFIG\['kernel'\] is 'auto', 'triton' or 'gluon', not 'Gluon'"),
    (None, r"not None"),
    ("gluon", r"'gluon' but the Gluon kernel cannot run this call: the tensors are not on a CUDA GPU"),
])
def test_a_kernel_that_cannot_run_is_refused_before_any_launch(config, kernel, match):
    config["kernel"] = kernel
    x = _inputs("S2")
    with Recorder() as rec, pytest.raises(ValueError, match=match):
        mod.fa4_decode(**x)
    assert rec.launches.triton == {} and rec.launches.torch_ops == {}


def test_the_hand_off_follows_the_kernel_value_and_the_rules(config, monkeypatch):
    """"auto" takes the Gluon forward exactly when _gluon_unfit says it can, "triton" never does, "gluon" does
    (stand-ins for both forwards: no kernel runs)."""
    calls = []
    monkeypatch.setattr(mod, "_gluon_forward", lambda *a: calls.append(("gluon", a[-1]["kernel"])))
    monkeypatch.setattr(mod, "_triton_forward", lambda *a: calls.append(("triton", None)))
    x = _inputs("S1")
    for unfit in ("", "no"):
        monkeypatch.setattr(mod, "_gluon_unfit", lambda *a, u=unfit: u)
        for kernel in ("auto", "triton", "gluon"):
            config["kernel"] = kernel
            if kernel == "gluon" and unfit:
                with pytest.raises(ValueError, match="cannot run this call: no;"):
                    mod.fa4_decode(**x)
            else:
                mod.fa4_decode(**x)
    assert calls == [("gluon", "auto"), ("triton", None), ("gluon", "gluon"), ("triton", None), ("triton", None)]


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


def _gpu_case(sid="S2", **change):
    """A contract call as stand-ins; `change` replaces tensors."""
    x = {**_inputs(sid), **change}
    return [_OnGpu(x[a]) for a in ARGS]


@pytest.fixture
def sm90(monkeypatch):
    """This module as it is on an H100: imported without the interpreter, device 0 an NVIDIA sm_90."""
    monkeypatch.setattr(mod, "_INTERPRETED", False)
    monkeypatch.setattr(mod, "_SM90", {})
    monkeypatch.setattr(mod, "_ROUTES", {})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "NVIDIA H100 80GB HBM3")


def test_on_an_sm90_gpu_the_gluon_kernel_takes_what_it_supports(sm90):
    for sid in ("S1", "S2", "E9"):  # E9: q_len 4 x G 16 = 64 rows, a full tile
        assert mod._gluon_unfit(*_gpu_case(sid)) == "", sid
    x = _inputs("S2")  # hq 4, hkv 2, q_len 4, two sequences
    bf = torch.bfloat16
    k_t = x["k_cache"].transpose(1, 2).contiguous().transpose(1, 2)  # [pages, 128, 2, 256], strided
    unfit = {
        "q_len 4 x group 32 = 128 packed rows, the kernel's tile holds 64": dict(q=torch.zeros(8, 64, 256, dtype=bf)),
        "q, k_cache, v_cache are torch.float16, torch.bfloat16, torch.bfloat16, not bfloat16": dict(q=x["q"].half()),
        "not bfloat16": dict(k_cache=x["k_cache"].float(), v_cache=x["v_cache"].float()),
        "page_table, kv_lens are torch.int64, torch.int32, not int32": dict(page_table=x["page_table"].long()),
        "q, k_cache and v_cache must be contiguous": dict(k_cache=k_t),
        "head dim 128/128, the kernel's is 256": dict(q=x["q"][..., :128].contiguous(),
                                                      k_cache=x["k_cache"][..., :128].contiguous(),
                                                      v_cache=x["v_cache"][..., :128].contiguous()),
        "pages of 64 tokens, the kernel's are 128": dict(k_cache=x["k_cache"][:, :64].contiguous(),
                                                         v_cache=x["v_cache"][:, :64].contiguous()),
        "both caches [pages, page, Hkv, D] alike": dict(v_cache=torch.zeros(3, 128, 2, 256, dtype=bf)),
        "7 q rows are not q_len rows for each of 2 sequences": dict(q=x["q"][:7]),
    }
    for why, change in unfit.items():
        assert why in mod._gluon_unfit(*_gpu_case("S2", **change)), why
    case = _gpu_case("S2")
    case[1] = _OnGpu(x["k_cache"], offset=2)  # one bf16 element in: TMA needs 16-byte aligned bases
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


# --- the Gluon path's host side, with a model of the kernel in place of its launch ------------------------

_MODEL_SEEN = {"rows_without_keys": 0, "tail_blocks": 0, "one_split_seqs": 0, "ctas_of_several_items": 0,
               "lengthened_chunks": 0}


def _cdiv(a, b):
    return (a + b - 1) // b


def _balanced_chunk_model(lens, hkv, bn, slots, min_chunk, overhead):
    """_gl_balanced_chunk in Python integers (the merge kernel's Triton _split_chunk must count alike)."""
    def cost(c):
        return _cdiv(hkv * sum(_cdiv(n, c) for n in lens), slots) * (c + overhead)
    fair = _cdiv(max(_cdiv(hkv * sum(lens), slots), min_chunk), bn) * bn
    best_c, best_cost = fair, cost(fair)
    longest = max(lens)
    k0 = _cdiv(longest, fair)
    cands = [_cdiv(fair * (8 + k) // 8, bn) * bn for k in range(1, 9)]
    cands += [_cdiv(_cdiv(longest, max(k0 - j, 1)), bn) * bn for j in range(8)]
    for c in cands:
        if cost(c) < best_cost:
            best_c, best_cost = c, cost(c)
    return best_c


def _gluon_kernel_model(grid, plan_key, args, kw):
    """_fa4_decode_gluon_kernel as its source reads, in float32 torch on the CPU, for every CTA of the
    persistent grid and each of its items; reads its arguments by the kernel's parameter names (so a
    misordered argument shows)."""
    fn = mod._fa4_decode_gluon_kernel
    names = list(fn.arg_names)
    assert len(args) + len(set(kw) - {"num_warps"}) == len(names)  # what _Launch hands the kernel
    a = dict(zip(names, args))
    a.update({n: kw[n] for n in names[len(args):]})
    q, o, pt, kvl = a["q_ptr"], a["o_ptr"], a["pt_ptr"], a["kvl_ptr"]
    q_len, g, page, d, bm, bn = a["Q_LEN"], a["G"], a["PAGE"], a["HEAD_D"], a["BLOCK_M"], a["BLOCK_N"]
    hkv = a["HKV"]
    assert (page, d, bm, bn, kw["num_warps"]) == (128, 256, 64, 64, 4)
    for desc in (a["k_desc"], a["v_desc"]):  # the 2-D view TMA reads: [pages * 128, Hkv * 256], [64, 256] boxes
        assert list(desc.block_shape) == [bn, d] and desc.base.is_contiguous()
        assert list(desc.shape) == list(desc.base.shape) and list(desc.strides) == [desc.base.shape[1], 1]
    kc, vc = a["k_desc"].base, a["v_desc"].base
    assert kc.shape[1] == hkv * d
    assert a["q_ptr"].stride() == (a["stride_qt"], a["stride_qh"], 1)
    assert a["o_ptr"].stride() == (a["stride_ot"], a["stride_oh"], 1)
    S, split_on = a["NUM_SPLITS"], a["SPLIT"]
    assert a["n_seqs"] == kvl.shape[0] and a["BLOCK_B"] >= kvl.shape[0] and split_on == (S > 1)
    assert len(grid) == 1 and grid[0] == min(a["SLOTS"], kvl.shape[0] * hkv * S)
    lens = [int(n) for n in kvl]
    min_chunk = (_balanced_chunk_model(lens, hkv, bn, a["SLOTS"], a["MIN_CHUNK"], a["OVERHEAD"])
                 if a["BALANCE"] else 0)
    # the item table: sequence-major, Hkv x n_b items for sequence b
    chunks = [max(_cdiv(_cdiv(n, S), bn) * bn, min_chunk, bn) for n in lens]
    _MODEL_SEEN["lengthened_chunks"] += sum(c > _cdiv(_cdiv(n, S), bn) * bn for n, c in zip(lens, chunks))
    n_sp = [_cdiv(n, c) for n, c in zip(lens, chunks)]
    items = [(b, kvh, split) for b in range(len(lens)) for kvh in range(hkv) for split in range(n_sp[b])]
    _MODEL_SEEN["one_split_seqs"] += sum(n == 1 for n in n_sp)
    scale = a["qk_scale"]
    r = torch.arange(bm)
    j, row_ok = r // g, r < q_len * g
    for pid in range(grid[0]):
        mine = items[pid::grid[0]]
        _MODEL_SEEN["ctas_of_several_items"] += len(mine) > 1
        for b, kvh, split in mine:
            kv_len, chunk = lens[b], chunks[b]
            n_start = split * chunk
            assert n_start < kv_len  # every item holds keys
            n_end = min(n_start + chunk, kv_len)
            n_blocks = _cdiv(n_end - n_start, bn)
            qrow, head = b * q_len + j, kvh * g + r % g
            b_q = torch.zeros(bm, d)
            b_q[row_ok] = q[qrow[row_ok], head[row_ok]].float()
            lim = torch.minimum(kv_len - q_len + j + 1, torch.tensor(n_end))
            m_i, l_i, acc = torch.full((bm,), -1.0e30), torch.zeros(bm), torch.zeros(bm, d)
            for i in range(n_blocks):
                n0 = n_start + i * bn
                assert n0 // page < _cdiv(kv_len, page)  # never a page-table slot past the sequence's pages
                row = int(pt[b, n0 // page]) * page + n0 % page  # the loader's box coordinates
                b_k = kc[row:row + bn, kvh * d:(kvh + 1) * d].float()
                b_v = vc[row:row + bn, kvh * d:(kvh + 1) * d].float().clone()
                s = b_q @ b_k.T
                s = torch.where((n0 + torch.arange(bn))[None, :] < lim[:, None], s, float("-inf"))
                m_new = torch.maximum(m_i, s.max(1).values * scale)
                p = torch.exp2(s * scale - m_new[:, None])
                alpha = torch.exp2(m_i - m_new)
                l_i = l_i * alpha + p.sum(1)
                m_i = m_new
                if n0 + bn > kv_len:
                    b_v[(n0 + torch.arange(bn)) >= kv_len] = 0.0
                    _MODEL_SEEN["tail_blocks"] += 1
                acc = acc * alpha[:, None] + p.bfloat16().float() @ b_v
            has = l_i > 0
            _MODEL_SEEN["rows_without_keys"] += int((row_ok & ~has).sum())
            l_safe = torch.where(has, l_i, torch.ones(()))
            out = acc / l_safe[:, None]
            if split_on and n_sp[b] > 1:
                op_, lp = a["op_ptr"], a["lsep_ptr"]
                lse = torch.where(has, m_i + torch.log2(l_safe), torch.tensor(float("-inf")))
                for rr in r[row_ok].tolist():
                    t, h = int(qrow[rr]), int(head[rr])
                    base_o = t * a["stride_opt"] + h * a["stride_oph"] + split * a["stride_ops"]
                    op_[base_o:base_o + d] = out[rr]
                    lp[t * a["stride_lt"] + h * a["stride_lh"] + split] = lse[rr]
            else:
                o[qrow[row_ok], head[row_ok]] = out[row_ok].bfloat16()


# E7 with kv_lens 66 and 130: with chunks of 64 the last split of each holds 2 keys, which drafts 0 and 1 do not see
MODEL_CASES = {"S1": {}, "S2": {}, "E7-66": dict(kv_lens=[66, 130]), "E9": {}, "E11": {}}


@pytest.mark.parametrize("slots", [132, 3], ids=["sms132", "sms3"])
@pytest.mark.parametrize("cfg", [SPLITTY, BALANCED, NOSPLIT], ids=["split", "balanced", "nosplit"])
@pytest.mark.parametrize("name", list(MODEL_CASES))
def test_the_gluon_host_path_with_a_model_kernel_meets_the_contract(monkeypatch, config, name, cfg, slots):
    """_gluon_forward as it runs on a GPU (plan, descriptors over the 2-D cache views, scratch, the launch
    arguments, the Triton merge kernel), the Gluon launch replaced by _gluon_kernel_model. The page table's
    padding slots hold an id past the pool: reading one would fail. With 3 SMs the persistent CTAs walk
    several items each, and the balanced chunk leaves sequences of one split (o written by the split kernel,
    skipped by the merge)."""
    config.update(cfg)
    monkeypatch.setattr(mod, "_num_sms", lambda device: slots)
    monkeypatch.setattr(mod, "_GL_PLANS", {})
    x = _inputs(name.split("-")[0], seed=3, **MODEL_CASES[name])
    pt = x["page_table"]
    need = [-(-int(n) // 128) for n in x["kv_lens"]]
    for b, n in enumerate(need):
        pt[b, n:] = 1 << 30
    launches = []
    for k in _MODEL_SEEN:
        monkeypatch.setitem(_MODEL_SEEN, k, 0)
    monkeypatch.setattr(mod, "_GL_LAUNCH", lambda *a: launches.append(a[2]) or _gluon_kernel_model(*a))
    with Recorder() as rec:
        o = mod._gluon_forward(*(x[a] for a in ARGS), None, dict(mod.CONFIG))
    splits = launches[0][-1]
    assert len(launches) == 1
    # the split count is the Triton path's shape-only policy with blocks of 64 keys; the merge runs iff S > 1
    assert splits == mod.num_splits_for(len(need), x["k_cache"].shape[2], pt.shape[1] * 128, mod.CONFIG, 132, 64)
    assert rec.launches.triton == ({"_fa4_decode_merge_kernel": 1} if splits > 1 else {})
    if cfg is not NOSPLIT:
        assert splits > 1
    assert _MODEL_SEEN["tail_blocks"] >= 1  # a last block holding rows >= kv_len (NaN in the pool)
    if slots == 3 and cfg is SPLITTY:
        assert _MODEL_SEEN["ctas_of_several_items"] >= 1
    if slots == 3 and cfg is BALANCED:
        assert _MODEL_SEEN["lengthened_chunks"] >= 1  # fewer, longer splits than "target"
        if name == "E7-66":  # 196 keys over 3 slots: chunks of 128, so the 66-key sequence is one split
            assert _MODEL_SEEN["one_split_seqs"] >= 1
    if name == "E7-66" and cfg is SPLITTY:
        # drafts 0 and 1 of 4 heads see neither key of the last split of either sequence (64-65, 128-129)
        assert _MODEL_SEEN["rows_without_keys"] == 2 * 2 * 4
    check_accuracy(o, x)


def test_gluon_plan_for_a_full_shape(config):
    """D3-q4 (32 x 16384 keys, Hq 16, Hkv 1, q_len 4): the 64-row tile, several splits, a persistent grid of
    one CTA an SM, the merge counting the same chunk (blocks of 64, the same slots)."""
    scale, splits, grid, merge_grid, kw, merge_kw, ws_len, n_o, ps, key = mod._gluon_plan(
        dict(mod.CONFIG), 128, 16, 256, 128, 1, 32, 128, torch.device("cpu"), None)
    assert splits == mod.num_splits_for(32, 1, 16384, mod.CONFIG, 132, 64) == 33  # cdiv(1056, 32)
    assert grid == (132,) and merge_grid == (128, 16)  # persistent: one CTA an SM (132 on CPU tensors)
    assert kw["Q_LEN"] * kw["G"] == 64 and kw["SPLIT"] and kw["STAGES"] == mod.CONFIG["gluon_stages"]
    assert kw["HKV"] == 1 and kw["SLOTS"] == 132 and kw["BALANCE"] is (mod.CONFIG["SPLIT_POLICY"] == "balanced")
    # the merge counts each sequence's splits with the split kernel's integers
    for k in ("BALANCE", "BLOCK_B", "SLOTS", "MIN_CHUNK", "OVERHEAD", "BLOCK_N"):
        assert merge_kw[k] == kw[k], k
    assert merge_kw["SKIP_ONE"] is True and kw["BLOCK_N"] == 64
    assert ps == (33 * 256 * 16, 33 * 256, 256, 33 * 16, 33) and n_o == 128 * 16 * 33 * 256
    assert ws_len == n_o + 128 * 16 * 33
    assert abs(scale - 256 ** -0.5 * 1.4426950408889634) < 1e-12
    # every constexpr of both kernels is in its kw: _Launch hands them positionally after the arguments
    assert set(kw) - {"num_warps"} == set(mod._fa4_decode_gluon_kernel.arg_names[-len(set(kw) - {"num_warps"}):])
    again = mod._gluon_plan(dict(mod.CONFIG), 128, 16, 256, 128, 1, 32, 128, torch.device("cpu"), None)
    assert again[-1] == key  # cached by shape and CONFIG
