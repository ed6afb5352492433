"""Issues 8 and 9 in the loop: plans cite wiki cards and evidence, the incumbent is profiled once per
run (run.json caches it), evidence steers the offline planner, lessons are written when a run ends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fakes import FakeEvaluator, source

from aka.agent.llm.base import Context, get_backend
from aka.agent.llm.offline import read_dict, render, topic_tags
from aka.agent.llm.scripted import ScriptedBackend
from aka.evaluate.static.compstats import CompileStats, KernelStats
from aka.knowledge.incumbent_facts import CPU_NOTE, slowest_shapes, worst_shape
from aka.knowledge.ncu_report import KernelProfile, ProfileSummary
from aka.knowledge.profile import ProfileError
from aka.records import RunBaseline
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.settings import Budget, OptimizeSettings
from aka.wiki import load_wiki

REPO = Path(__file__).resolve().parents[2]
KDIR = REPO / "kernels" / "gdn_prefill"
BASELINE = KDIR / "baseline.py"


def ctx(history=(), incumbent: str | None = None, evidence=(), root: Path | None = REPO, attempt=0) -> Context:
    return Context(op="gdn_prefill", attempt=attempt, incumbent_source=incumbent or BASELINE.read_text(),
                   incumbent_label="baseline", baseline_path=str(BASELINE), kernel_dir=str(KDIR),
                   hardware={"sms": 132}, history=list(history), evidence=list(evidence),
                   root=str(root) if root else "")


def plans(n: int, score=None, **kw) -> list:
    """n offline plans, each recorded as scored (default: every attempt a little better than the last)."""
    be, history, out = get_backend("offline"), [], []
    for i in range(n):
        plan, _ = be.plan(ctx(history, attempt=i, **kw))
        out.append(plan)
        history.append({"n": i, "plan": plan.model_dump(), "config": plan.fixed_config(),
                        "score": score(plan, i) if score else 1.0 + i / 100, "failed_stage": ""})
    return out


# --- issue 8: offline plans cite the cards of the change they make


def test_offline_plans_cite_only_cards_about_what_they_change():
    tags = {c.id: set(c.meta.tags) for c in load_wiki(REPO / "wiki")}
    ps = plans(6)
    first = ps[0]  # single_pass: context parallelism off relative to the baseline
    assert first.pattern == "single_pass" and "affine-transition-context-parallel" in first.cited_wiki
    assert "fuse-stages-skip-hbm" not in first.cited_wiki  # output fusion is unchanged there
    assert all(p.cited_wiki for p in ps)
    base = read_dict(BASELINE.read_text(), "CONFIG")
    for p in ps:
        changed = [c.split(":")[0] for c in p.cited_evidence] or [k for k, v in p.fixed_config().items()
                                                                    if base[k] != v]
        want = set(topic_tags(changed))
        assert all(tags[c] & want for c in p.cited_wiki), (p.pattern, changed, p.cited_wiki)
    assert plans(1, root=None)[0].cited_wiki == []  # no project root, no wiki: nothing is cited


# --- issue 9: evidence steers the offline planner


def spill(kernel: str) -> dict:
    return {"id": f"prof:spills:{kernel}", "kind": "spills", "kernel": kernel, "shape": "G1",
            "text": f"{kernel} spills: 60 local words/thread", "numbers": {"n_spills": 60.0}}


def test_a_spilling_kernel_is_never_offered_larger_blocks_or_more_stages():
    src = BASELINE.read_text()
    # the segment kernel (_seg_kernel: its block BVA and loop stages) at the bottom of both ranges, so
    # every step the search takes on them is a larger block or more stages
    incumbent = render(src, {**read_dict(src, "CONFIG"), "BVA": 32, "seg_loop_stages": 1})
    free = plans(30, incumbent=incumbent)
    steered = plans(30, incumbent=incumbent, evidence=[spill("_seg_kernel")])

    def too_big(ps):
        return [p.fixed_config() for p in ps if p.pattern == "context_parallel"
                and (p.fixed_config()["BVA"] > 32 or p.fixed_config()["seg_loop_stages"] > 1)]

    assert too_big(free)  # without the evidence the search does go there (so the check below means something)
    assert too_big(steered) == []
    cp = [p for p in steered if p.pattern == "context_parallel"]
    assert cp and all("prof:spills:_seg_kernel" in p.cited_evidence for p in cp)
    assert any("prof:spills:_seg_kernel" in a for a in cp[0].avoided)


# --- the loop: profile once per run, evidence offered, lessons written


def settings(**kw) -> OptimizeSettings:
    return OptimizeSettings(op="gdn_prefill", commit=False, prepare_ahead=0, **kw)


class Profiler:
    def __init__(self, fail: bool = False):
        self.calls: list[str] = []  # ncu profiles
        self.quick: list[str] = []  # kernel durations only
        self.fail = fail

    def __call__(self, op, path: Path, shape: str, *, timeout: float, use_ncu: bool = True) -> ProfileSummary:
        (self.calls if use_ncu else self.quick).append(shape)
        if self.fail:
            raise ProfileError("ncu exploded")
        spills = KernelStats(name="_fwd_kernel", n_regs=255, n_spills=28, num_warps=8, num_stages=1)
        kernels = [KernelProfile(name="_fwd_kernel", duration_us=30.0),
                   KernelProfile(name="_seg_kernel", duration_us=10.0),
                   KernelProfile(name="_fwd_kernel", launch=1, duration_us=5.0)]
        return ProfileSummary(op=op.name, shape=shape, kernel_file=str(path), source="none",
                              kernels=[] if use_ncu else kernels,
                              compile=CompileStats(available=True, kernels=[spills]))


def test_the_profile_never_holds_up_the_first_candidate_and_the_next_run_plans_from_its_cache(project, op):
    ev, prof = FakeEvaluator(op, timing="gpu"), Profiler()
    steps = [{"source": source(1.0, tag="a")}, {"source": source(1.0, tag="b")}, {"source": source(0.9, tag="d")}]
    s2 = settings(budget=Budget(max_candidates=2))
    store = prepare_run(project / "runs", s2, op, ev)
    seen_calls: list[int] = []

    class Counting(ScriptedBackend):
        def plan(self, context):
            seen_calls.append(len(prof.calls))
            return super().plan(context)

    run_loop(store, s2, op, Counting(steps[:2]), ev, profiler=prof)
    assert seen_calls == [0, 0]  # no profile before (or between) the candidates: it came after them
    assert prof.calls == [worst_shape(store.read_run().baseline)]
    base = store.read_run().baseline
    assert prof.quick == slowest_shapes(base, 2, exclude=prof.calls[0]) and len(prof.quick) == 2
    assert store.read_run().profile["kernel_times"] == {s: {"_fwd_kernel": 35.0, "_seg_kernel": 10.0}
                                                          for s in prof.quick}
    assert store.read_run().profile["summary"]["shape"] == prof.calls[0]
    assert [r.evidence_offered for r in store.attempts()] == [[], []]  # this run planned without it
    run_loop(store, settings(budget=Budget(max_candidates=3)), op, ScriptedBackend(steps), ev, profiler=prof)  # resume
    assert len(prof.calls) == 1  # the resume read run.json instead
    assert store.attempts()[-1].evidence_offered == ["prof:spills:_fwd_kernel"]
    # the next run of the same incumbent on the same device reads the cache: evidence from its first plan
    ev2, prof2 = FakeEvaluator(op, timing="gpu"), Profiler()
    s1 = settings(budget=Budget(max_candidates=1))
    nxt = prepare_run(project / "runs", s1, op, ev2)
    run_loop(nxt, s1, op, ScriptedBackend([{"source": source(1.0, tag="c")}]), ev2, profiler=prof2)
    assert prof2.calls == [] and prof2.quick == []
    assert "cached" in nxt.read_run().profile["note"]
    assert [r.evidence_offered for r in nxt.attempts()] == [["prof:spills:_fwd_kernel"]]
    # competitors: deferred in the first run, timed after its candidates, cached for the next
    assert ev.calls.count("competitors") == 1 and "competitors" not in ev2.calls
    for st in (store, nxt):
        b = st.read_run().baseline
        assert b.competitors_us["fla"] and b.competitors_notes[0] == "sdpa: ImportError: fake"


def test_a_failed_profile_is_a_note_and_the_run_goes_on(project, op):
    ev = FakeEvaluator(op, timing="gpu")
    store = prepare_run(project / "runs", settings(budget=Budget(max_candidates=1)), op, ev)
    run_loop(store, settings(budget=Budget(max_candidates=1)), op, ScriptedBackend([{"source": source(1.1)}]), ev,
             profiler=Profiler(fail=True))
    prof = store.read_run().profile
    assert prof["summary"] is None and prof["note"] == "no profile: ProfileError: ncu exploded"
    assert prof["kernel_times"] == {} and prof["kernel_times_notes"][0].endswith(": ProfileError: ncu exploded")
    assert len(store.attempts()) == 1 and store.attempts()[0].evidence_offered == []


def test_cpu_runs_note_no_profile_and_time_no_competitors(project, op):
    ev, prof = FakeEvaluator(op, timing="interpreter"), Profiler()
    s = settings(budget=Budget(max_candidates=1), interpreter=True)
    store = prepare_run(project / "runs", s, op, ev)
    run_loop(store, s, op, ScriptedBackend([{"source": source(1.1)}]), ev, profiler=prof)
    run = store.read_run()
    assert prof.calls == [] and run.profile["note"] == CPU_NOTE
    assert "competitors" not in ev.calls and run.baseline.competitors_us == {}


def test_no_profile_skips_the_profiler_on_a_gpu_run(project, op):
    ev, prof = FakeEvaluator(op, timing="gpu"), Profiler()
    s = settings(budget=Budget(max_candidates=1), profile=False)
    store = prepare_run(project / "runs", s, op, ev)
    run_loop(store, s, op, ScriptedBackend([{"source": source(1.1)}]), ev, profiler=prof)
    assert prof.calls == [] and store.read_run().profile["note"] == "no profile: --no-profile"
    assert store.attempts()[0].evidence_offered == []


def test_no_competitors_skips_their_timing_on_a_gpu_run(project, op):
    ev = FakeEvaluator(op, timing="gpu")
    store = prepare_run(project / "runs", settings(budget=Budget(max_candidates=1), competitors=False), op, ev)
    base = store.read_run().baseline
    assert "competitors" not in ev.calls
    assert base.competitors_us == {} and base.competitors_notes == ["competitors not timed: --no-competitors"]


def test_deferred_competitors_and_profile_fit_in_what_max_time_leaves(project, op):
    """With less than 30 s of --max-time left after the candidates, neither runs (each says so); with
    more, the competitors' timing is capped at what is left."""
    ev, prof = FakeEvaluator(op, timing="gpu"), Profiler()
    tight = settings(budget=Budget(max_candidates=1, max_time_s=20))
    store = prepare_run(project / "runs", tight, op, ev)
    run_loop(store, tight, op, ScriptedBackend([{"source": source(1.0, tag="a")}]), ev, profiler=prof)
    run = store.read_run()
    assert "competitors" not in ev.calls and prof.calls == []
    assert run.baseline.competitors_notes[-1].startswith("competitors still deferred: --max-time leaves ")
    assert run.profile["deferred"] and run.profile["note"].startswith("profile still deferred: --max-time leaves ")
    roomy = settings(budget=Budget(max_candidates=1, max_time_s=100))
    store = prepare_run(project / "runs", roomy, op, ev)
    run_loop(store, roomy, op, ScriptedBackend([{"source": source(1.0, tag="b")}]), ev, profiler=prof)
    assert ev.calls.count("competitors") == 1 and 90 < ev.competitor_timeouts[0] <= 100
    assert store.read_run().baseline.competitors_us["fla"]
    unlimited = settings(budget=Budget(max_candidates=1))
    ev.calls.clear()
    shutil.rmtree(project / "runs" / op.name / ".cache")  # the roomy run cached them: time them again
    store = prepare_run(project / "runs", unlimited, op, ev)
    run_loop(store, unlimited, op, ScriptedBackend([{"source": source(1.0, tag="c")}]), ev, profiler=prof)
    assert ev.competitor_timeouts[-1] == unlimited.competitors_timeout_s


def test_lessons_are_written_when_a_run_ends_even_before_any_attempt(project, op):
    ev = FakeEvaluator(op, timing="gpu")
    s = settings(budget=Budget(max_candidates=2))
    store = prepare_run(project / "runs", s, op, ev)
    run_loop(store, s, op, ScriptedBackend([]), ev, profiler=Profiler())  # exhausted at once: no attempt
    assert (store.path / "lessons.jsonl").read_text() == ""
    run_loop(store, s, op, ScriptedBackend([{"source": source(1.2)}, {"source": source(1.0, gate="fail")}]), ev,
             profiler=Profiler())
    lessons = [json.loads(x) for x in (store.path / "lessons.jsonl").read_text().splitlines()]
    assert [les["kind"] for les in lessons] == ["worked", "failed"]


def test_lessons_are_written_on_ctrl_c(project, op):
    ev = FakeEvaluator(op, timing="gpu")
    s = settings(budget=Budget(max_candidates=3))
    store = prepare_run(project / "runs", s, op, ev)

    class CtrlC(ScriptedBackend):
        def plan(self, context):
            if context.attempt == 1:
                raise KeyboardInterrupt
            return super().plan(context)

    with pytest.raises(KeyboardInterrupt):
        run_loop(store, s, op, CtrlC([{"source": source(1.2)}, {"source": source(1.3)}]), ev, profiler=Profiler())
    assert len((store.path / "lessons.jsonl").read_text().splitlines()) == 1


def test_worst_shape_is_furthest_from_the_roofline_else_the_slowest():
    both = RunBaseline(incumbent_roofline={"G1": 0.5, "G2": 0.1}, incumbent_us={"G1": 9.0, "G2": 1.0})
    assert worst_shape(both) == "G2"
    assert worst_shape(RunBaseline(incumbent_us={"G1": 9.0, "G2": 1.0})) == "G1"


def test_cpu_gate_rounds_below_two_is_one_clear_error():
    with pytest.raises(ValueError, match="cpu_gate_rounds=1: the gate needs at least 2 rounds"):
        OptimizeSettings(op="gdn_prefill", cpu_gate_rounds=1)


def test_the_next_run_of_an_op_plans_with_the_top_lessons_of_earlier_runs(project, op):
    ev = FakeEvaluator(op, timing="gpu")
    s = settings(budget=Budget(max_candidates=2))
    first = prepare_run(project / "runs", s, op, ev)
    steps = [{"plan": {"hypothesis": "BV 32 halves the state registers"}, "source": source(1.2)},
             {"plan": {"hypothesis": "BV 128 for fewer programs"}, "source": source(1.0, gate="fail")}]
    run_loop(first, s, op, ScriptedBackend(steps), ev, profiler=Profiler())
    seen = []

    class Seeing(ScriptedBackend):
        def plan(self, context):
            seen.append(context.lessons)
            return super().plan(context)

    second = prepare_run(project / "runs", s, op, ev)
    lessons = second.read_run().lessons
    assert first.read_run().lessons == [] and len(lessons) == 2
    assert lessons[0] == f"worked (run {first.run_id} #0, 1.200x vs baseline): BV 32 halves the state registers"
    assert lessons[1].startswith(f"failed (run {first.run_id} #1): BV 128 for fewer programs -- gate")
    run_loop(second, s, op, Seeing([{"source": source(1.0, tag="x")}]), ev, profiler=Profiler())
    assert seen and all(x == lessons for x in seen)  # what the incumbent block lists (prompts.lessons_text)
