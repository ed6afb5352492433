"""kernels/<op>/knowledge.json (issue 36): the typed file, entries from a run's records (GPU timings
only), the merge, the prompt lines, and a loop whose second run no longer re-measures the first's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import FakeEvaluator

from aka.agent.llm.offline import OfflineBackend, read_dict, render
from aka.evaluate.parent.outcomes import code_hash
from aka.knowledge.measured import (
    Entry,
    Knowledge,
    KnowledgeError,
    Promotion,
    deferred,
    entry_from,
    knowledge_lines,
    knowledge_path,
    read_knowledge,
    record,
    record_run,
    template_hash,
)
from aka.records import Attempt, BenchRecord, CompareRecord, Decision, Measurements, Plan, RunRecord
from aka.run.store import RunStore

REPO = Path(__file__).resolve().parents[2]
KDIR = REPO / "kernels" / "gdn_prefill"
SRC = (KDIR / "baseline.py").read_text()
INC = read_dict(SRC, "CONFIG")
H = code_hash(SRC)
H200 = "NVIDIA H200"


def entry(structure="single_pass", ratio=0.82, **kw) -> Entry:
    base = dict(device=H200, timing="graph", structure=structure, phase="structure", config={**INC, "cp": False},
                changes={"cp": False}, ratio=ratio, measure="paired", incumbent_hash=H,
                template_hash=template_hash(SRC), run_id="20261203-100000-aaaaaa", attempt=0,
                date="2026-12-03T10:00:00")
    return Entry(**{**base, **kw})


# -- the file ---------------------------------------------------------------------------------------


def test_the_file_round_trips_and_a_missing_or_empty_one_is_empty(tmp_path):
    path = knowledge_path(tmp_path)
    assert read_knowledge(path) == Knowledge()
    path.write_text("  \n")
    assert read_knowledge(path).entries == []
    a = entry()
    b = entry("context_parallel", 0.91, phase="parameters", config={**INC, "BV": 32}, changes={"BV": 32}, attempt=3)
    assert record(path, [a, b], op="gdn_prefill") == 2
    back = read_knowledge(path)
    assert back.op == "gdn_prefill" and sorted(back.entries, key=lambda e: e.attempt) == [a, b]
    assert len(path.read_text().splitlines()) == 4  # one line per entry: a new measurement is a one-line diff


@pytest.mark.parametrize("text, why", [
    ("{not json", "not JSON"),
    ('{"version": 1, "entries": [{"device": "NVIDIA H200"}]}', "entries.0.timing"),
    ('{"version": 7, "entries": []}', "version"),
])
def test_a_malformed_file_is_one_line_naming_it(tmp_path, text, why):
    path = knowledge_path(tmp_path)
    path.write_text(text)
    with pytest.raises(KnowledgeError) as err:
        read_knowledge(path)
    assert str(path) in str(err.value) and why in str(err.value) and "\n" not in str(err.value)


def test_the_newest_measurement_of_a_key_replaces_the_older(tmp_path):
    path = knowledge_path(tmp_path)
    old, new = entry(ratio=0.80), entry(ratio=0.84, run_id="20261204-000000-bbbbbb", date="2026-12-04T00:00:00")
    record(path, [new])
    assert record(path, [old]) == 0  # older than what the file holds: kept out
    assert [e.ratio for e in read_knowledge(path).entries] == [0.84]
    other = entry(device="NVIDIA H100")  # another device model is another key
    record(path, [other, new])
    assert sorted(e.device for e in read_knowledge(path).entries) == ["NVIDIA H100", H200]


def test_a_rendered_candidate_hashes_like_its_template():
    cand = render(SRC, {**INC, "cp": False, "BV": 32})
    assert code_hash(cand) != code_hash(SRC) and template_hash(cand) == template_hash(SRC)
    assert template_hash(SRC.replace("def ", "def  ", 1)) != template_hash(SRC)  # code outside CONFIG counts


# -- entries from a run -----------------------------------------------------------------------------


def _attempt(n, pattern, config, *, structural=False, bench=None, compare=None, promote=False, failed="",
             timing="gpu"):
    plan = Plan(hypothesis=f"attempt {n}", pattern=pattern, structural_change=f"{pattern}: x" if structural else "",
                param_ranges={k: [v] for k, v in config.items()})
    return Attempt(n=n, started=f"2026-12-03T10:0{n}:00", plan=plan, config=config, failed_stage=failed,
                   bench=bench, compare=compare, measurements=Measurements(timing=timing),
                   code_hash=code_hash(render(SRC, config)),
                   decision=Decision(promote=promote, verdict="promoted" if promote else "rejected", reason="r"))


def _paired(ratio, timing="gpu"):
    return BenchRecord(times_us={"G1": 100 / ratio}, timing=timing, vs_incumbent=ratio, paired=True)


def make_run(root: Path, attempts: list[Attempt], device=None, timing="graph") -> Path:
    """A finished run directory as the loop leaves it: run.json, the incumbent's copy, candidates, log."""
    device = device or {"name": H200, "interpreter": False, "sms": 132}
    store = RunStore.create(root / "runs", "gdn_prefill", {"started": "2026-12-03T10:00:00", "device": device,
                                                           "baseline": {"rank_timing": timing}})
    inc = store.write_candidate("incumbent", SRC)
    store.update_run(incumbent={"label": "baseline", "path": str(inc), "hash": H}, status="finished")
    for rec in attempts:
        if rec.plan and rec.plan.pattern:
            store.write_candidate(rec.n, render(SRC, rec.config))
        else:
            store.write_candidate(rec.n, "def gdn_prefill(**kw):\n    return None\n")
        store.append_attempt(rec)
    store.close()
    return store.path


def history() -> list[Attempt]:
    cp_bv32 = {**INC, "BV": 32}
    promoted = {**INC, "seg_warps": 8 if INC["seg_warps"] != 8 else 4}
    after = {**promoted, "BVA": 128 if INC["BVA"] != 128 else 64}
    return [
        _attempt(0, "single_pass", {**INC, "cp": False}, structural=True, bench=_paired(0.82)),
        _attempt(1, "split_context_parallel", {**INC, "fuse_output": False}, structural=True, bench=_paired(0.9),
                 compare=CompareRecord(geomean=0.64, timing="gpu")),  # the ABBA geomean wins over the screen
        _attempt(2, "context_parallel", cp_bv32, bench=_paired(1.3, timing="interpreter"), timing="interpreter"),
        _attempt(3, "context_parallel", {**INC, "BV": 16}, failed="gate", timing="none"),  # never timed
        Attempt(n=4, plan=Plan(hypothesis="an LLM's own code"), bench=_paired(1.1)),  # no pattern: not the search's
        _attempt(5, "context_parallel", promoted, bench=_paired(1.04), promote=True,
                 compare=CompareRecord(geomean=1.05, timing="gpu")),
        _attempt(6, "context_parallel", after, bench=_paired(0.95)),  # measured against candidate 5
    ]


def test_record_run_keeps_gpu_timings_only_each_against_its_incumbent(tmp_path):
    run = make_run(tmp_path, history())
    kdir = tmp_path / "kernels" / "gdn_prefill"
    assert record_run(run, kdir) == 4
    got = {e.attempt: e for e in read_knowledge(knowledge_path(kdir)).entries}
    assert sorted(got) == [0, 1, 5, 6]  # interpreter (2), untimed (3) and pattern-less (4) attempts left out
    assert (got[0].ratio, got[0].measure, got[0].phase, got[0].changes) == (0.82, "paired", "structure", {"cp": False})
    assert (got[1].ratio, got[1].measure, got[1].changes) == (0.64, "abba", {"fuse_output": False})
    assert {e.device for e in got.values()} == {H200} and {e.timing for e in got.values()} == {"graph"}
    assert {got[n].incumbent_hash for n in (0, 1, 5)} == {H} and got[0].run_id == run.name
    assert {e.template_hash for e in got.values()} == {template_hash(SRC)}
    assert got[6].incumbent_hash == code_hash((run / "candidates" / "5.py").read_text())
    assert list(got[6].changes) == ["BVA"]  # relative to candidate 5's CONFIG, not the starting incumbent's
    assert got[5].config == history()[5].config and got[0].date == "2026-12-03T10:00:00"
    assert record_run(run, kdir) == 4 and len(read_knowledge(knowledge_path(kdir)).entries) == 4  # idempotent


def test_an_interpreter_run_records_nothing(tmp_path):
    recs = [_attempt(0, "single_pass", {**INC, "cp": False}, structural=True, bench=_paired(0.5))]
    run = make_run(tmp_path, recs, device={"name": "cpu (Triton interpreter)", "interpreter": True, "sms": 0},
                   timing="eager")
    kdir = tmp_path / "kernels" / "gdn_prefill"
    assert record_run(run, kdir) == 0 and not knowledge_path(kdir).exists()


def test_entry_from_is_pure_and_gpu_only():
    fields = {"device": {"name": H200}, "baseline": {"rank_timing": "graph"}, "incumbent": {"hash": H}, "run_id": "r"}
    run = RunRecord.model_validate(fields)
    cand = render(SRC, {**INC, "cp": False})
    rec = _attempt(0, "single_pass", {**INC, "cp": False}, structural=True, bench=_paired(0.82))
    e = entry_from(rec, run, INC, cand)
    assert e is not None and e.ratio == 0.82 and e.changes == {"cp": False} and e.incumbent_hash == H
    cpu = _attempt(0, "single_pass", {**INC, "cp": False}, bench=_paired(0.82, timing="interpreter"))
    assert entry_from(cpu, run, INC, cand) is None
    cpu_run = RunRecord.model_validate({**fields, "device": {"name": "cpu", "interpreter": True}})
    assert entry_from(rec, cpu_run, INC, cand) is None
    assert entry_from(rec, run, INC, "def f():\n    pass\n") is None  # no CONFIG: not a rendered template


def _op_dir(tmp_path):
    """kernels/gdn_prefill of a project in tmp_path: SRC as its baseline, the shipped patterns."""
    kdir = tmp_path / "kernels" / "gdn_prefill"
    (kdir / "patterns").mkdir(parents=True)
    (kdir / "baseline.py").write_text(SRC)
    for f in (KDIR / "patterns").glob("*.yaml"):
        (kdir / "patterns" / f.name).write_text(f.read_text())
    return kdir


def test_knowledge_lines_for_the_prompts(tmp_path):
    kdir = _op_dir(tmp_path)
    (kdir / "patterns" / "wide_context_parallel.yaml").write_text(  # a third structure, of this project only
        "name: wide_context_parallel\ndescription: context_parallel at 8 segment warps\ntemplate: ../baseline.py\n"
        "fixed: {cp: true, seg_warps: 8}\nparams: [BVA]\nconstraints: []\nregions: []\n")
    record(knowledge_path(kdir), [
        entry(),
        entry("context_parallel", 0.91, phase="parameters", config={**INC, "BV": 32}, changes={"BV": 32}),
        entry("wide_context_parallel", 0.64, config={**INC, "seg_warps": 8}, changes={"seg_warps": 8}),
        entry("single_pass", 0.70, timing="eager"),  # another timing
        entry("gone", 0.5),  # a pattern since removed
    ])
    lines = knowledge_lines(kdir, H200, "graph", H)
    assert lines == ["wide_context_parallel (structure): 0.64x vs the incumbent, NVIDIA H200, graph",
                     "single_pass (structure): 0.82x vs the incumbent, NVIDIA H200, graph",
                     "context_parallel BV=32: 0.91x vs the incumbent, NVIDIA H200, graph"]
    assert knowledge_lines(kdir, H200, "graph", "0" * 16) == []
    assert knowledge_lines(kdir, "NVIDIA H100", "graph", H) == []
    (kdir / "baseline.py").write_text(SRC + "\n# edited\n")  # the template changed: its entries are stale
    assert knowledge_lines(kdir, H200, "graph", H) == []


# -- first looks against earlier code (a hand-edited incumbent) --------------------------------------

OLD1, OLD2 = "1" * 16, "2" * 16  # two earlier incumbents, neither this one (H) nor replaced by it


def stale_look(ratio, inc, **kw) -> Entry:
    return entry("single_pass", ratio, incumbent_hash=inc, run_id=f"2026120{inc[0]}-100000-aaaaaa", **kw)


@pytest.mark.parametrize("looks, defers", [
    ([(0.73, OLD1), (0.614, OLD2)], True),  # the H200's record before 2026-12-07
    ([(0.73, OLD1)], False),  # one earlier kernel: may be that kernel's
    ([(0.73, OLD1), (0.614, OLD1)], False),  # twice against the same one
    ([(0.73, OLD1), (0.614, OLD2), (0.95, OLD2)], False),  # one first look did not lose
    ([(0.73, OLD1), (0.614, OLD2), (0.95, "3" * 16)], False),
])
def test_stale_first_looks_defer_only_after_losing_against_two_incumbents(looks, defers):
    k = Knowledge(entries=[stale_look(r, inc, config={**INC, "cp": False, "n": i}) for i, (r, inc) in enumerate(looks)])
    got = deferred(k.stale(H200, "graph", H), k.applicable(H200, "graph", H))
    assert (got != {}) is defers
    if defers:
        assert [e.ratio for e in got["single_pass"]] == [0.614, 0.73]  # slowest first


def test_what_counts_as_stale():
    looks = [stale_look(0.73, OLD1), stale_look(0.614, OLD2)]
    k = Knowledge(entries=looks)
    assert k.stale(H200, "graph", H) == looks and k.applicable(H200, "graph", H) == []
    assert deferred(k.stale("NVIDIA H100 80GB HBM3", "graph", H)) == {}  # another device model
    assert deferred(k.stale(H200, "eager", H)) == {}  # another timing
    # OLD2 was replaced by this incumbent through a recorded promotion: its entry applies, not stale
    chained = Knowledge(entries=looks, promotions=[Promotion(device=H200, timing="graph", incumbent_hash=H,
                                                             previous_hash=OLD2, ratio=1.02, run_id="r", attempt=1)])
    assert chained.stale(H200, "graph", H) == looks[:1] and deferred(chained.stale(H200, "graph", H)) == {}
    # a failed first look is another story: it neither defers nor clears
    failed = stale_look(0.5, "3" * 16, failed="gate")
    assert deferred([looks[0], failed]) == {} and set(deferred([*looks, failed])) == {"single_pass"}
    # stale parameter entries play no part, losing or not
    params = [stale_look(r, inc, phase="parameters", config={**INC, "cp": False, "BV": 32}, changes={"BV": 32})
              for r, inc in ((0.5, OLD1), (0.6, OLD2))]
    assert deferred(params) == {}
    assert set(deferred([*looks, stale_look(1.2, OLD1, phase="parameters")])) == {"single_pass"}
    # what applies and did not lose clears it; an applicable loss does not
    assert deferred(looks, [entry("single_pass", 0.95, phase="parameters")]) == {}
    assert set(deferred(looks, [entry("single_pass", 0.506)])) == {"single_pass"}


def test_knowledge_lines_name_first_looks_lost_against_earlier_code(tmp_path):
    kdir = _op_dir(tmp_path)
    record(knowledge_path(kdir), [
        stale_look(0.73, OLD1), stale_look(0.614, OLD2, template_hash="0" * 16),  # templates may have changed too
        entry("gone", 0.5, incumbent_hash=OLD1), entry("gone", 0.5, incumbent_hash=OLD2),  # a pattern since removed
        entry("context_parallel", 0.91, phase="parameters", config={**INC, "BV": 32}, changes={"BV": 32}),
    ])
    assert knowledge_lines(kdir, H200, "graph", H) == [
        "single_pass (structure): 0.61x, 0.73x vs earlier code (2 earlier kernels, not this incumbent), "
        "NVIDIA H200, graph",
        "context_parallel BV=32: 0.91x vs the incumbent, NVIDIA H200, graph"]
    assert knowledge_lines(kdir, "NVIDIA H100", "graph", H) == []


# -- a loop, twice ----------------------------------------------------------------------------------

TOY = '''"""A toy template: its speed is read from CONFIG by the evaluator below."""

CONFIG = {"mode": "ref", "x": 2}
SPACE = {"mode": ["ref", "slow"], "x": [1, 2, 3, 4, 5, 6, 7, 8]}


def gdn_prefill(**kw):
    return None
'''


class ConfigSpeed(FakeEvaluator):
    """Times from the candidate's CONFIG: the 'slow' structure is 0.7x, x does nothing."""

    def _speed(self, path, shape):
        return 0.7 if read_dict(Path(path).read_text(), "CONFIG").get("mode") == "slow" else 1.0


def test_a_second_run_skips_what_the_first_measured_slower(project):
    from aka.contract.ops import get_op
    from aka.run.loop import run_loop
    from aka.run.setup import prepare_run
    from aka.settings import Budget, OptimizeSettings

    kdir = project / "kernels" / "gdn_prefill"
    (kdir / "baseline.py").write_text(TOY)
    (kdir / "patterns").mkdir()
    for name, mode in (("a_ref", "ref"), ("b_slow", "slow")):
        (kdir / "patterns" / f"{name}.yaml").write_text(
            f"name: {name}\ntemplate: ../baseline.py\nfixed: {{mode: {mode}}}\nparams: [x]\n")
    op = get_op("gdn_prefill", project)
    settings = OptimizeSettings(op="gdn_prefill", budget=Budget(max_candidates=3), commit=False)

    def run_once():
        ev = ConfigSpeed(op, timing="gpu", paired=True)
        store = prepare_run(project / "runs", settings, op, ev)
        run_loop(store, settings, op, OfflineBackend(), ev)
        store.close()
        return store.path, [a.plan.pattern for a in store.attempts()], [a.config for a in store.attempts()]

    first, patterns, configs = run_once()
    assert patterns[0] == "b_slow"  # the first look
    assert record_run(first, op) == 3
    known = read_knowledge(knowledge_path(kdir))
    assert {(e.structure, round(e.ratio, 2)) for e in known.entries} >= {("b_slow", 0.7)}
    assert {e.device for e in known.entries} == {"fake H200"} and {e.timing for e in known.entries} == {"eager"}
    second, patterns2, configs2 = run_once()
    assert "b_slow" not in patterns2
    assert not [c for c in configs2 if c in configs]  # nothing the first run measured is measured again
    plan = Attempt.model_validate(json.loads((second / "attempts.jsonl").read_text().splitlines()[0])).plan
    assert "b_slow 0.70x" in plan.hypothesis and any("known: b_slow" in a for a in plan.avoided)
