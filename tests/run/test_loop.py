"""Whole loops on CPU with a scripted backend and an injected evaluator (the CLI cannot inject one)."""

from __future__ import annotations

import json
import subprocess

from fakes import FakeEvaluator, source

from aka.agent.llm.scripted import ScriptedBackend
from aka.contract.ops import get_op
from aka.records import Promoted
from aka.run import gitops
from aka.run.loop import run_loop
from aka.run.setup import prepare_run
from aka.settings import Budget, OptimizeSettings

STEPS = [
    {"source": source(1.3, check="fail")},  # refused by the static check
    {"source": source(1.3, compile="fail")},  # does not compile
    {"source": source(1.3, gate="fail")},  # wrong answers: never timed
    {"source": source(1.2, tag="a")},  # promoted (+20%)
    {"source": source(1.2, tag="a")},  # identical code: not re-measured
    {"source": source(1.205, tag="b")},  # +0.4% over the incumbent: too small to re-measure
    {"source": source(1.5, tag="c", slow="G4:0.75")},  # faster overall, G4 12.5% slower than incumbent
    {"source": source(1.32, tag="d")},  # promoted (+10%)
]


def _loop(project, op, timing, commit=True, steps=STEPS):
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=len(steps)), commit=commit,
                                interpreter=timing != "gpu")
    ev = FakeEvaluator(op, timing=timing)
    store = prepare_run(project / "runs", settings, op, ev)
    summary = run_loop(store, settings, op, ScriptedBackend(steps), ev)
    return store, summary, ev


def test_gpu_timed_loop_promotes_into_git(project, op):
    store, summary, ev = _loop(project, op, "gpu")
    att = store.attempts()
    assert [a.failed_stage for a in att[:5]] == ["check", "compile", "gate", "", "duplicate"]
    verdicts = [a.decision.verdict for a in att]
    assert verdicts == ["rejected"] * 3 + ["promoted", "rejected", "rejected", "rejected", "promoted"]
    assert "too small to re-measure" in att[5].decision.reason
    assert "G4 slower" in att[6].decision.reason
    # setup + every compiled candidate on the small sets (the screen: 2 rounds); ABBA only for promising
    # ones, and for those the comparison would promote the small sets again with all 3 rounds, then the full set
    assert ev.calls.count("gate:smoke+edge") == 6 + 2 and ev.calls.count("compare") == 3
    assert ev.calls.count("gate:full") == 2
    assert att[6].gate.passed["S1"] == [True, True] and att[7].gate.passed["S1"] == [True, True, True]
    meta = json.loads((project / "kernels/gdn_prefill/promoted.json").read_text())
    assert meta["attempt"] == 7 and abs(meta["geomean_vs_baseline"] - 1.32) < 1e-9
    assert abs(meta["speedup_vs_previous"]["G1"] - 1.1) < 1e-9 and meta["device"] == "fake H200"
    assert meta["gate"]["passed"]["G10"] == [True, True, True]
    log = subprocess.run(["git", "log", "--format=%s"], cwd=project, capture_output=True, text=True).stdout
    assert log.splitlines()[0].startswith("gdn_prefill: promote attempt 7 of run") and "+10.0% vs previous" in log
    assert len(gitops.history(project, "gdn_prefill")) == 2
    assert summary["stop_reason"].startswith("budget") and summary["incumbent"] == "candidate 7"


def test_a_candidate_whose_abba_outputs_are_wrong_is_rejected_for_it(project, op):
    """Fast and right in the screen, garbage in the re-measure (a call counter): the reason says so."""
    store, _, _ = _loop(project, op, "gpu", steps=[{"source": source(1.5, abba="wrong")}])
    rec = store.attempts()[0]
    assert rec.decision.verdict == "rejected"
    assert rec.decision.reason.startswith("bench failed: ABBA re-measure rejected it: check: candidate on G3")
    assert not (project / "kernels/gdn_prefill/promoted.py").exists()


def test_interpreter_timings_promote_nothing(project, op):
    store, summary, ev = _loop(project, op, "interpreter", steps=[{"source": source(9.0)}, {"source": source(20)}])
    reasons = {a.decision.reason for a in store.attempts()}
    assert reasons == {"not promoted: interpreter timings cannot promote"}
    assert "gate:full" not in ev.calls and "compare" not in ev.calls
    assert not (project / "kernels/gdn_prefill/promoted.py").exists()
    assert abs(summary["best_score"] - 20.0) < 1e-9  # still scored, so the search can steer


def test_promotion_refused_when_another_run_promoted_meanwhile(project, op):
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=1), commit=True)
    ev = FakeEvaluator(op, timing="gpu")
    store = prepare_run(project / "runs", settings, op, ev)
    gitops.promote(project, "gdn_prefill", source(1.1, tag="other"), Promoted(code_hash="other"), "other run", True)
    run_loop(store, settings, op, ScriptedBackend([{"source": source(1.5)}]), ev)
    d = store.attempts()[0].decision
    assert not d.promote and "changed during this run" in d.reason


def test_unusable_backend_answer_is_recorded_with_its_tokens(project, op):
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=2), commit=False, interpreter=True)
    ev = FakeEvaluator(op, timing="interpreter")
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, ScriptedBackend([{"fail": "codegen"}, {"source": source(1.1)}], tokens=10), ev)
    first, second = store.attempts()
    assert first.failed_stage == "codegen" and first.tokens == 10
    assert first.decision.reason.startswith("no usable candidate: codegen")
    assert second.decision.reason == "not promoted: interpreter timings cannot promote"


def test_offline_search_with_parallel_preparation_never_repeats(project, op):
    """Four candidates prepared ahead while one is measured: every attempt distinct, none lost."""
    import shutil

    from aka.agent.llm.base import get_backend

    real = fakes_repo() / "kernels" / "gdn_prefill"
    shutil.copy(get_op("gdn_prefill", fakes_repo()).path("baseline"), project / "kernels/gdn_prefill/baseline.py")
    shutil.copytree(real / "patterns", project / "kernels/gdn_prefill/patterns")
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=12), commit=False, interpreter=True,
                                prepare_ahead=4)
    ev = FakeEvaluator(op, timing="interpreter", delay_s=0.05)
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, get_backend("offline"), ev)
    att = store.attempts()
    assert [a.n for a in att] == list(range(12))
    assert len({a.code_hash for a in att}) == 12 and all(a.failed_stage != "duplicate" for a in att)
    assert {a.plan.pattern for a in att} == {"single_pass", "context_parallel"}  # both structures looked at


def fakes_repo():
    from fakes import REPO

    return REPO


def _drift_loop(project, op, paired):
    steps = [{"source": source(1.04, tag="a")}]  # truly 4% faster than the baseline
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=1), commit=False)
    ev = FakeEvaluator(op, drift=1.15, paired=paired)  # the screen's GPU reads 15% slow
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, ScriptedBackend(steps), ev)
    return store.attempts()[0], ev


def test_screen_drift_hides_a_gain_unless_the_incumbent_is_timed_beside_it(project, op):
    unpaired, ev = _drift_loop(project, op, paired=False)
    assert unpaired.bench.vs_incumbent < 0.95 and "compare" not in ev.calls
    assert "too small to re-measure" in unpaired.decision.reason
    paired, ev = _drift_loop(project, op, paired=True)
    assert paired.bench.paired and abs(paired.bench.vs_incumbent - 1.04) < 1e-9
    assert abs(paired.score - 1.04) < 1e-9 and "compare" in ev.calls
    assert paired.decision.promote


def test_paired_scores_chain_through_promotions(project, op):
    steps = [{"source": source(1.2, tag="a")}, {"source": source(1.32, tag="d")}]
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=2), commit=False)
    ev = FakeEvaluator(op, drift=0.9, paired=True)
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, ScriptedBackend(steps), ev)
    a, d = store.attempts()
    assert a.decision.promote and d.decision.promote
    assert abs(d.bench.vs_incumbent - 1.1) < 1e-9 and abs(d.score - 1.32) < 1e-9


def test_promoted_json_reads_the_abba_chain_not_the_drifting_screen(project, op):
    steps = [{"source": source(1.2, tag="a")}, {"source": source(1.32, tag="d", slow="G2:0.98")}]
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=2))
    ev = FakeEvaluator(op, drift=0.9)  # unpaired screen reading 10% fast
    store = prepare_run(project / "runs", settings, op, ev)
    run_loop(store, settings, op, ScriptedBackend(steps), ev)
    a, d = store.attempts()
    assert abs(a.score - 1.2 / 0.9) < 1e-9 and abs(a.measurements.geomean - 1.2) < 1e-9
    meta = json.loads((project / "kernels/gdn_prefill/promoted.json").read_text())
    assert meta["attempt"] == 1 and abs(meta["speedup_vs_previous"]["G2"] - 1.1 * 0.98) < 1e-9
    assert abs(meta["speedup_vs_baseline"]["G2"] - 1.32 * 0.98) < 1e-9
    assert abs(meta["geomean_vs_baseline"] - 1.2 * d.measurements.geomean) < 1e-9
