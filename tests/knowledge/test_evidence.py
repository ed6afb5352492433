"""Evidence items from a profile and the constraints the offline planner derives from them."""

from pathlib import Path

import pytest

from aka.contract.ops import get_op
from aka.evaluate.static.compstats import CompileStats, KernelStats
from aka.knowledge.evidence import Constraints, as_prompt, evidence_for_plan, kernel_params, steer
from aka.knowledge.ncu_report import ProfileSummary, parse_ncu_csv

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def summary():
    kernels = parse_ncu_csv((DATA / "ncu_raw.csv").read_text())
    stats = CompileStats(available=True, kernels=[
        KernelStats(name="_fwd_kernel", hash="f1", n_regs=255, n_spills=226, num_warps=4, num_stages=2, local_ldst=40),
        KernelStats(name="_prep_kernel", hash="p1", n_regs=168, n_spills=0, num_warps=4),
    ])
    return ProfileSummary(op="gdn_prefill", shape="G1", kernel_file="baseline.py", source="ncu", kernels=kernels,
                          compile=stats, total_us=sum(k.duration_us or 0 for k in kernels), floor_us=300.0)


@pytest.fixture(scope="module")
def items(summary):
    return {e.id: e for e in evidence_for_plan(summary, {"G1": 0.27})}


def test_ids_kinds_and_numbers(items):
    assert items["roofline:G1"].numbers["roofline_frac"] == 0.27  # the bench's number wins over the profile's
    share = items["prof:time-share:_fwd_kernel"]
    assert share.numbers["share"] == pytest.approx(612.736 / 1127.904, abs=1e-3)
    spills = items["prof:spills:_fwd_kernel"]
    assert spills.kind == "spills" and spills.numbers["n_spills"] == 226 and "255 registers" in spills.text
    assert "prof:spills:_prep_kernel" not in items


def test_latency_bound_and_low_occupancy_cite_stalls(items):
    lat = items["prof:latency-bound:_fwd_kernel"]
    assert "long_scoreboard 55%" in lat.text and lat.numbers["stall_long_scoreboard"] == pytest.approx(0.5535)
    assert items["prof:low-occupancy:_fwd_kernel"].numbers["achieved_occupancy_pct"] == pytest.approx(11.87)
    assert "prof:memory-bound:_fwd_kernel" not in items


def test_bank_conflicts_need_a_real_share_of_wavefronts(summary, items):
    assert not any(i.startswith("prof:bank-conflicts") for i in items)  # prep has them but is 2 % of the call
    fwd = summary.kernels[-1]
    few = fwd.model_copy(update={"smem_bank_conflicts_st": 1000.0})  # 0.05 % of 2 M wavefronts: noise
    many = fwd.model_copy(update={"smem_bank_conflicts_st": 500_000.0})
    for k, expected in ((few, False), (many, True)):
        got = {e.id: e for e in evidence_for_plan(summary.model_copy(update={"kernels": [k]}))}
        assert ("prof:bank-conflicts:_fwd_kernel" in got) is expected
    assert got["prof:bank-conflicts:_fwd_kernel"].numbers["ratio"] == pytest.approx(500_000 / 2_097_152)


def test_small_kernels_are_ignored(items):
    assert not any(i.endswith(":_index_kernel") for i in items)  # 0.3 % of the call


def test_prompt_lines_are_citable(summary):
    text = as_prompt(evidence_for_plan(summary))
    assert text.splitlines()[0].startswith("- [roofline:G1] G1: ")


# Host code shaped like kernels/gdn_prefill/baseline.py's launch sites (kept here: the baseline evolves).
HOST = """
CONFIG = {"BV": 64, "fwd_warps": 4, "fwd_stages": 2, "reload_k": True, "BVA": 64, "seg_warps": 4,
          "seg_stages": 2, "BVC": 32, "prep_warps": 4, "cp": True}
SPACE = {"BV": [32, 64, 128], "fwd_warps": [4, 8], "fwd_stages": [1, 2, 3], "reload_k": [True, False],
         "BVA": [32, 64, 128], "seg_warps": [4, 8], "seg_stages": [1, 2, 3], "BVC": [32, 64],
         "prep_warps": [2, 4, 8], "cp": [True, False]}

def forward(q, cfg):
    _prep_kernel[(HV, nt)](k, g, PREC=cfg["prep_prec"], num_warps=cfg["prep_warps"])
    if seg < nt:
        bva = cfg["BVA"]
        _seg_kernel[((K + V) // bva, HV, ns)](k, v, BVA=bva, num_warps=cfg["seg_warps"], num_stages=cfg["seg_stages"])
        bvc = cfg["BVC"]
        _chain_kernel[(V // bvc, HV, N)](mc, BVC=bvc, BKC=32, num_warps=4)
    bv = cfg["BV"]
    _fwd_kernel[(V // bv, HV, ns)](q, BV=bv, RELOAD_K=cfg["reload_k"], num_warps=cfg["fwd_warps"],
                                   num_stages=cfg["fwd_stages"])
"""


@pytest.fixture(scope="module")
def baseline():
    from aka.agent.llm.offline import read_dict

    return read_dict(HOST, "SPACE"), read_dict(HOST, "CONFIG"), kernel_params(HOST)


def test_kernel_params_read_from_launch_sites(baseline):
    _, _, params = baseline
    assert params["_fwd_kernel"] == ["BV", "fwd_stages", "fwd_warps", "reload_k"]
    assert params["_seg_kernel"] == ["BVA", "seg_stages", "seg_warps"]
    assert params["_prep_kernel"] == ["prep_prec", "prep_warps"]
    assert params["_chain_kernel"] == ["BVC"]


def test_kernel_params_of_the_real_baseline():
    params = kernel_params(get_op("gdn_prefill").path("baseline").read_text())
    assert params["_fwd_kernel"] == []  # its value block, warps and loop stages are constants, not CONFIG
    assert "BVC" not in params["_seg_kernel"]
    # bva, nwarm = cfg["BVA"], cfg["cp_warm_chunks"]: each name carries its own key
    assert {"BVA", "cp_warm_chunks", "seg_loop_stages", "seg_warps"} <= set(params["_seg_kernel"])
    assert "cp_warm_chunks" in params["_chain_kernel"] and "BVA" not in params["_chain_kernel"]


def test_spills_forbid_bigger_blocks_and_deeper_pipelines(items, baseline):
    space, config, params = baseline
    c = steer(list(items.values()), space, config, params)
    assert c.forbid["BV"] == [128] and c.forbid["fwd_stages"] == [3]  # config: BV 64, 2 stages
    assert "fwd_stages" not in c.prefer or 3 not in c.prefer["fwd_stages"]  # forbidding beats preferring
    assert c.prefer["fwd_warps"] == [8]
    assert c.prefer["BV"] == [32] and c.prefer["cp"] == [True]  # latency-bound / low occupancy: more programs
    assert "prof:spills:_fwd_kernel" in c.cited and "prof:time-share:_fwd_kernel" not in c.cited
    narrowed = c.apply(space, config)
    assert narrowed["BV"] == [32, 64] and narrowed["fwd_stages"] == [1, 2] and narrowed["fwd_warps"] == [4, 8]
    start = c.nudge(config)
    assert (start["BV"], start["fwd_warps"], start["fwd_stages"], start["cp"]) == (32, 8, 2, True)


def test_latency_bound_without_spills_prefers_more_stages(summary, baseline):
    space, config, params = baseline
    calm = summary.model_copy(update={"compile": CompileStats(available=True, kernels=[])})
    c = steer(evidence_for_plan(calm), space, config, params)
    assert c.prefer["fwd_stages"] == [3] and "fwd_stages" not in c.forbid


def test_no_evidence_no_constraints(baseline):
    space, config, params = baseline
    assert steer([], space, config, params) == Constraints()
    assert Constraints().apply(space, config) == space and Constraints().nudge(config) == config


def test_kernel_params_through_a_launcher_object():
    # the gdn stages launch through module-level _Launch objects, not kernel[grid](...)
    src = (
        "import triton\n"
        "@triton.jit\n"
        "def _k(x, B: tl.constexpr):\n"
        "    pass\n"
        "_K_LAUNCH = _Launch(_k)\n"
        "def run(x, cfg):\n"
        "    b = cfg['B']\n"
        "    _K_LAUNCH((1,), (x,), dict(B=b, num_warps=cfg['w']))\n"
    )
    assert kernel_params(src) == {"_k": ["B", "w"]}
