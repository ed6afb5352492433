"""What the planner and codegen see (issue 19, part 3): the evidence the run has, in a cache-friendly order
(the incumbent block first, the same on every call until a promotion; the attempt's request after it)."""

from __future__ import annotations

import json

from aka.agent.llm import prompts
from aka.agent.llm.base import Context
from aka.contract.ops import get_op
from aka.evaluate.static.compstats import CompileStats, KernelStats
from aka.knowledge.ncu_report import KernelProfile, ProfileSummary
from aka.records import Plan

GDN = get_op("gdn_prefill")


def run_json(tmp_path):
    stats = CompileStats(available=True, kernels=[KernelStats(name="_fwdks_kernel", n_regs=255, n_spills=36,
                                                              shared_bytes=65536, num_warps=4, num_stages=2)])
    profile = ProfileSummary(op="gdn_prefill", shape="G1", kernel_file="x", source="ncu", kernels=[
        KernelProfile(name="_fwdks_kernel", duration_us=145.0), KernelProfile(name="_seg_kernel", duration_us=71.0)])
    run = {"settings": {"rules": {"min_gain": 0.01, "shape_margin": 0.05}},
           "baseline": {"timing": "gpu", "baseline_us": {"G1": 1000.0, "G4": 4000.0},
                        "incumbent_us": {"G1": 500.0, "G4": 2500.0}, "incumbent_roofline": {"G1": 0.31, "G4": 0.42},
                        "competitors_us": {"fla": {"G1": 450.0, "G4": 2000.0}},
                        "incumbent_compile": stats.model_dump()},
           "profile": {"shape": "G1", "summary": profile.model_dump(),
                       "kernel_times": {"G4": {"_fwdks_kernel": 900.0, "_seg_kernel": 300.0}}}}
    (tmp_path / "run.json").write_text(json.dumps(run))
    return str(tmp_path)


MEASURED = {"n": 0, "plan": {"hypothesis": "BV 64 -> 32"}, "failed_stage": "", "score": 1.01,
            "edit": '- "BV": 64, | + "BV": 32,', "compare": {"noise": 0.008},
            "bench": {"times_us": {"G1": 476.0, "G4": 2551.0}, "incumbent_us": {"G1": 500.0, "G4": 2500.0},
                      "vs_incumbent": 1.01}, "decision": {"promote": False, "verdict": "rejected",
                                                      "reason": "not promoted: +1.0% is within the noise"}}
FLYING = {"n": 1, "plan": {"hypothesis": "fwd_warps 4 -> 8"}, "edit": '- "fwd_warps": 4, | + "fwd_warps": 8,'}


def ctx(tmp_path, attempt=2, history=(MEASURED,), pending=(FLYING,)):
    return Context(op="gdn_prefill", attempt=attempt, incumbent_source="# the incumbent's source\n",
                   incumbent_label="baseline", baseline_path="", kernel_dir="", hardware={"interpreter": False},
                   history=list(history), pending=list(pending), run_dir=run_json(tmp_path),
                   lessons=["worked (run R #3, 1.050x vs baseline): BVC 32 -> 64"])


def test_the_incumbent_block_carries_the_runs_evidence(tmp_path):
    block = prompts.plan_blocks(GDN, ctx(tmp_path), "triton")[0]["text"]
    assert ("- G1 (batch 1, medium; hk 16, hv 32, dim 128): 500.0 µs, 2.00x the baseline's speed, 31% of the "
            "roofline, fla 450.0 µs") in block  # exact dimensions, roofline fraction, the competitors
    assert "- G1 (batch 1, medium; hk 16, hv 32, dim 128), 216.0 µs in kernels: _fwdks_kernel 145.0 µs (67%)" in block
    assert "- G4 (batch 1, long; hk 16, hv 32, dim 128), 1200.0 µs in kernels: _fwdks_kernel 900.0 µs (75%)" in block
    assert "_fwdks_kernel[" in block and "regs 255 spills 36 smem 65536 B warps 4 stages 2" in block
    assert "- worked (run R #3, 1.050x vs baseline): BVC 32 -> 64" in block  # lessons of earlier runs
    assert block.rstrip().endswith("```python\n# the incumbent's source\n```")


def test_the_request_after_it_carries_history_noise_and_the_candidate_in_flight(tmp_path):
    ask = prompts.plan_blocks(GDN, ctx(tmp_path), "triton")[1]["text"]
    assert "- #0: BV 64 -> 32\n  edit: - \"BV\": 64, | + \"BV\": 32,\n  outcome: measured;" in ask
    assert "per shape vs incumbent (screen): G1 1.05, G4 0.98" in ask
    assert "- #1 IN FLIGHT (written, being measured now: do not propose it again): fwd_warps 4 -> 8" in ask
    assert "ABBA re-measure noise ±0.8% of the geomean (attempt 0" in ask and "above 1.0%" in ask
    assert "# the incumbent's source" not in ask


def test_the_stable_block_is_the_same_for_every_call_until_a_promotion(tmp_path):
    a = prompts.plan_blocks(GDN, ctx(tmp_path, 1, (), ()), "triton")
    b = prompts.plan_blocks(GDN, ctx(tmp_path, 2), "triton")
    c = prompts.codegen_blocks(GDN, ctx(tmp_path, 2), Plan(hypothesis="h"), "triton", tools=16, gpu=True)
    assert a[0] == b[0] == c[0] and a[0]["cache"] and not b[1].get("cache")
    promoted = {**MEASURED, "decision": {"promote": True, "verdict": "promoted", "reason": "promoted"}}
    d = prompts.plan_blocks(GDN, ctx(tmp_path, 3, (MEASURED, promoted), ()), "triton")
    assert d[0] != a[0] and "476.0 µs" in d[0]["text"]  # the promoted candidate's figures
    assert "profiled for the starting incumbent only" in d[0]["text"]
    assert "At most 16 tool calls" in c[1]["text"] and "time and profile run on this GPU" in c[1]["text"]


def test_the_incumbent_block_lists_what_earlier_runs_measured_against_it(tmp_path):
    """Issue 36: the prompts read kernels/<op>/knowledge.json too, not only the offline search."""
    import shutil

    from aka.agent.llm.offline import read_dict
    from aka.evaluate.parent.outcomes import code_hash
    from aka.knowledge.measured import Entry, knowledge_path, record, template_hash

    kdir = tmp_path / "kernels" / "gdn_prefill"
    shutil.copytree(GDN.path("baseline").parent / "patterns", kdir / "patterns")
    shutil.copy(GDN.path("baseline"), kdir / "baseline.py")
    src = GDN.path("baseline").read_text()
    record(knowledge_path(kdir), [Entry(
        device="NVIDIA H200", timing="graph", structure="single_pass", phase="structure",
        config={**read_dict(src, "CONFIG"), "cp": False}, changes={"cp": False}, ratio=0.73, measure="paired",
        incumbent_hash=code_hash(src), template_hash=template_hash(src), run_id="R", attempt=0, date="2026-12-03")])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_json(run_dir)
    raw = json.loads((run_dir / "run.json").read_text())
    raw["baseline"]["rank_timing"] = "graph"
    (run_dir / "run.json").write_text(json.dumps(raw))
    c = Context(op="gdn_prefill", attempt=0, incumbent_source=src, incumbent_label="baseline", baseline_path="",
                kernel_dir=str(kdir), hardware={"name": "NVIDIA H200", "interpreter": False}, run_dir=str(run_dir))
    block = prompts.plan_blocks(GDN, c, "triton")[0]["text"]
    assert "- single_pass (structure): 0.73x vs the incumbent, NVIDIA H200, graph" in block
    c.hardware = {"name": "NVIDIA H100", "interpreter": False}
    other = prompts.plan_blocks(GDN, c, "triton")[0]["text"]
    assert "single_pass (structure)" not in other and "(none recorded for this incumbent on this device)" in other


def test_the_system_prompt_names_the_contracts_knobs():
    # the gate passes them on edge cases: a model must know its entry point has to take them
    from aka.agent.llm.prompts import interface_text
    from aka.contract.ops import get_op

    text = interface_text(get_op("gdn_prefill").spec)
    assert "Knobs" in text and "`cp_segment_chunks`" in text
    assert "Knobs" not in interface_text(get_op("fa4_decode").spec)
