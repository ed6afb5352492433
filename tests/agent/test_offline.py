"""The offline backend on the real gdn_prefill pattern library: rendering, planning, replay."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from aka.agent.llm.base import Context, get_backend
from aka.agent.llm.offline import load_patterns, read_dict, render, structure_of

REPO = Path(__file__).resolve().parents[2]
KDIR = REPO / "kernels" / "gdn_prefill"
BASELINE = KDIR / "baseline.py"


def ctx(history=(), hardware=None, attempt=0):
    return Context(op="gdn_prefill", attempt=attempt, incumbent_source=BASELINE.read_text(), incumbent_label="baseline",
                   baseline_path=str(BASELINE), kernel_dir=str(KDIR), hardware=hardware or {"sms": 132},
                   history=list(history))


def test_render_substitutes_only_the_config_literal():
    src = BASELINE.read_text()
    cfg = {**read_dict(src, "CONFIG"), "BV": 32, "cp": False}
    out = render(src, cfg)
    assert read_dict(out, "CONFIG") == cfg
    ast.parse(out)
    before, after = src.split("CONFIG = ", 1), out.split("CONFIG = ", 1)
    assert before[0] == after[0] and before[1].split("\nSPACE", 1)[1] == after[1].split("\nSPACE", 1)[1]


def test_patterns_pin_structure_and_respect_the_kernel_space():
    pats = {p.name: p for p in load_patterns(KDIR, BASELINE)}
    assert set(pats) == {"context_parallel", "single_pass", "split_context_parallel", "split_single_pass"}
    space = read_dict(BASELINE.read_text(), "SPACE")
    single = structure_of(pats["single_pass"], {"sms": 132}, {})
    single_knobs = {"BV", "fwd_algo", "fwd_warps", "fwd_stages", "fwd_loop_stages", "fwd_prefetch", "ks_split",
                    "reload_k", "pre_p", "prep_algo", "prep_warps", "prep_prec", "prep_bk", "p_kernel", "p_warps"}
    assert single.start["cp"] is False and single.start["fuse_output"] is True
    assert set(single.space) <= single_knobs  # no dead knob: every mutation changes the kernel
    split = structure_of(pats["split_single_pass"], {"sms": 132}, {})
    assert split.start["fuse_output"] is False and "BV" not in split.space and "rec_BV" in split.space
    assert "cp_min_programs" not in single.space and not any(k.startswith("seg_") for k in single.space)
    cp = structure_of(pats["context_parallel"], {"sms": 132}, {})
    assert cp.start["cp"] is True and "cp" not in cp.space
    assert {"cp_warm_chunks", "cp_warm_log_decay", "prep_algo"} <= set(cp.space)  # the warm-up is searched
    assert cp.space["cp_min_programs"] == [132, 264, 528]  # the H200 region
    assert structure_of(pats["context_parallel"], {"sms": 0}, {}).space["cp_min_programs"] == space["cp_min_programs"]
    for s in (single, cp):
        assert all(set(vals) <= set(space[k]) for k, vals in s.space.items())


def test_offline_backend_plans_renders_and_replays_from_history():
    be = get_backend("offline")
    history = []
    hashes = []
    for n in range(4):
        plan, usage = be.plan(ctx(history, attempt=n))
        src, _ = be.candidate(plan, ctx(history, attempt=n))
        assert usage.total == 0 and plan.pattern and read_dict(src, "CONFIG") == {
            **read_dict(BASELINE.read_text(), "CONFIG"), **plan.fixed_config()}
        history.append({"n": n, "plan": plan.model_dump(), "config": plan.fixed_config(),
                        "score": 1.0 + n / 10 if n != 1 else None, "failed_stage": "gate" if n == 1 else ""})
        hashes.append(hash(src))
    assert len(set(hashes)) == 4
    again, _ = be.plan(ctx(history[:2], attempt=2))
    assert again.model_dump() == history[2]["plan"]  # resume proposes what the killed run would have


def test_unknown_backend_is_one_clear_line():
    from aka.agent.llm.base import UnknownBackendError

    with pytest.raises(UnknownBackendError, match="unknown backend 'gpt9'; choose one of: .*offline.*scripted"):
        get_backend("gpt9")


@pytest.mark.parametrize("name", ["gdn_prefill", "fa4_prefill", "fa4_decode"])
def test_every_pattern_matches_its_template_and_renders_policy_clean(name):
    """Guards the library against knobs renamed in the kernel: each pattern's start passes the policy."""
    from aka.contract.ops import get_op
    from aka.evaluate.policy import check_source

    op = get_op(name, REPO)
    kdir = REPO / "kernels" / name
    pats = load_patterns(kdir, kdir / "baseline.py")
    assert len(pats) >= 3 and all(p.name != "baseline" for p in pats)  # a library, not the fallback
    for p in pats:
        src = p.template.read_text()
        config, space = read_dict(src, "CONFIG"), read_dict(src, "SPACE")
        assert set(p.params or []) <= set(space), (p.name, set(p.params or []) - set(space))
        assert all(k in config and (k not in space or v in space[k]) for k, v in p.fixed.items()), p.name
        s = structure_of(p, {"sms": 132}, {})
        assert s.valid(s.start), p.name
        report = check_source(render(src, s.start), op.spec)
        assert report.ok, (p.name, report.message)


@pytest.mark.parametrize("name", ["fa4_prefill", "fa4_decode"])
def test_fa4_patterns_search_around_the_incumbent(name):
    """The incumbent is the start of one pattern (never proposed again); the search's first proposals
    are the other structures, then parameter steps, all inside the constraints."""
    kdir = REPO / "kernels" / name
    base = kdir / "baseline.py"

    def c(n, history):
        return Context(op=name, attempt=n, incumbent_source=base.read_text(), incumbent_label="baseline",
                       baseline_path=str(base), kernel_dir=str(kdir), hardware={"sms": 132}, history=list(history))

    pats = {p.name: p for p in load_patterns(kdir, base)}
    structures = {n: structure_of(p, {"sms": 132}, read_dict(base.read_text(), "CONFIG")) for n, p in pats.items()}
    inc = read_dict(base.read_text(), "CONFIG")
    assert [n for n, s in structures.items() if s.start == inc]  # the incumbent belongs to one structure
    be = get_backend("offline")
    history, seen = [], []
    for n in range(6):
        plan, _ = be.plan(c(n, history))
        cfg = {**inc, **plan.fixed_config()}
        assert cfg != inc and cfg not in seen
        assert structures[plan.pattern].valid(plan.fixed_config())
        seen.append(cfg)
        history.append({"n": n, "plan": plan.model_dump(), "config": plan.fixed_config(), "score": 1.0,
                        "failed_stage": ""})
    assert {h["plan"]["pattern"] for h in history} >= set(pats) - {n for n, s in structures.items() if s.start == inc}


def test_the_search_sees_which_shape_refused_an_attempt():
    from aka.agent.llm.offline import trials_from
    from aka.records import Attempt, Decision, Plan

    plan = Plan(hypothesis="h", pattern="split_waves", param_ranges={"BLOCK_N": [64]})
    refused = Attempt(n=0, plan=plan, config={"BLOCK_N": 64}, score=1.08,
                      decision=Decision(promote=False, verdict="rejected", reason="D6-q1 slower by 11.8% (margin 5%)",
                                        blocked_by="D6-q1"))
    old = Attempt.model_validate({"n": 1, "plan": plan.model_dump(), "config": {"BLOCK_N": 32}, "score": 1.0,
                                  "decision": {"promote": False, "verdict": "rejected", "reason": "x"}})
    assert [t.blocked_by for t in trials_from([refused, old])] == ["D6-q1", ""]  # records before the field read as ""
