"""`aka regress`: the exit-code decision with injected timings, first measurements, JUnit against the schema."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from fakes import source

from aka.contract.ops import get_op
from aka.report.junit import junit_xml
from aka.report.regress import OpCheck, RegressError, classify, parse_threshold, run_regress
from aka.run import gitops

SCHEMA = xmlschema.XMLSchema(Path(__file__).with_name("junit.xsd"))
SHAPES = ["G1", "G2", "G3"]


def check(times=None, recorded=None, baseline=None, gate=None, kernel="promoted", **kw) -> OpCheck:
    return OpCheck(op="gdn_prefill", kernel=kernel, gate_shapes=SHAPES, bench_shapes=SHAPES,
                   gate=gate if gate is not None else {s: True for s in SHAPES}, times_us=times,
                   recorded_us=recorded, baseline_us=baseline, **kw)


REC = {"G1": 100.0, "G2": 200.0, "G3": 50.0}


def test_all_within_threshold_exits_0():
    out = classify([check(times={"G1": 104.0, "G2": 190.0, "G3": 52.0}, recorded=REC, baseline=REC)], 0.05)
    assert out.exit_code == 0 and not out.failures("performance") and out.first_measurement == []


def test_a_slow_shape_exits_2_and_is_named():
    out = classify([check(times={"G1": 100.0, "G2": 212.0, "G3": 50.0}, recorded=REC)], 0.05)
    assert out.exit_code == 2 and [c.shape for c in out.failures("performance")] == ["G2"]
    assert "gdn_prefill/G2" in out.summary() and "+6.0% against the recorded 200.0" in out.summary()


def test_threshold_is_the_boundary():
    times = {"G1": 110.0, "G2": 200.0, "G3": 50.0}
    assert classify([check(times=times, recorded=REC)], 0.10).exit_code == 0
    assert classify([check(times=times, recorded=REC)], 0.09).exit_code == 2


def test_slower_than_the_baseline_is_a_regression_even_without_records():
    out = classify([check(times={"G1": 120.0, "G2": 200.0, "G3": 50.0}, baseline=REC)], 0.05)
    assert out.exit_code == 2 and "against the baseline's 100.0" in out.failures("performance")[0].message


def test_correctness_wins_over_performance():
    gate = {"G1": True, "G2": False, "G3": True}
    out = classify([check(times={"G1": 300.0, "G2": 200.0, "G3": 50.0}, recorded=REC, gate=gate,
                          gate_reasons={"G2": "round 0: o: rel L2 3e-1 > 1e-2"})], 0.05)
    assert out.exit_code == 1 and [c.shape for c in out.failures("correctness")] == ["G2"]
    assert "rel L2 3e-1" in out.failures("correctness")[0].message


def test_shapes_the_gate_never_reached_fail():
    out = classify([check(gate={}, gate_error="crash: worker died of SIGSEGV")], 0.05)
    assert out.exit_code == 1 and len(out.failures("correctness")) == 3
    assert out.failures("correctness")[0].message == "not checked: crash: worker died of SIGSEGV"


def test_an_untimed_shape_fails_performance():
    out = classify([check(times={"G1": 100.0, "G3": 50.0}, recorded=REC)], 0.05)
    assert out.exit_code == 2 and [c.shape for c in out.failures("performance")] == ["G2"]


def test_no_recorded_numbers_is_a_first_measurement():
    out = classify([check(times={"G1": 1.0, "G2": 1.0, "G3": 1.0})], 0.05)
    assert out.exit_code == 0 and out.first_measurement == ["gdn_prefill"]


def test_cpu_skips_timing():
    out = classify([check(times=None, skip_reason="timing skipped: no GPU")], 0.05)
    assert out.exit_code == 0 and {c.status for c in out.cases if c.kind == "performance"} == {"skipped"}


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.05", 0.05), (" 12.5% ", 0.125)])
def test_parse_threshold(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["fast", "-1%", "%"])
def test_parse_threshold_rejects(text):
    with pytest.raises(RegressError, match="--threshold"):
        parse_threshold(text)


# ---------------------------------------------------------------------------------------------
# the I/O part with an injected measurer, on a project whose kernel the real loop promoted


class FakeMeasurer:
    """Times are 100 µs / speed (the '# speed=' mark of the kernel file) times `factor`."""

    def __init__(self, name="fake H200", gpu=True, factor=1.0, wrong: set[str] = frozenset()):
        self.name, self.gpu, self.factor, self.wrong = name, gpu, factor, wrong
        self.gated: list[list[str]] = []

    def device(self):
        return {"name": self.name, "interpreter": not self.gpu, "torch": "x"}

    def gate(self, op, kernel, sets):
        self.gated.append(sets)
        ids = [c.id for s in sets for c in op.cases(s)]
        return {i: i not in self.wrong for i in ids}, {i: "round 0: o: all zeros" for i in self.wrong}, ""

    def bench(self, op, kernels, shapes):
        from fakes import marks

        out = {}
        for name, path in kernels.items():
            speed = float(marks(Path(path).read_text()).get("speed", 1.0))
            f = self.factor if name == "kernel" else 1.0
            out[name] = {c.id: 100.0 / speed * f for c in op.cases(shapes)}
        return out, ""


def test_promoted_kernel_holds_against_its_own_numbers(gpu_run, project):
    out, changed = run_regress([get_op("gdn_prefill", project)], FakeMeasurer(), 0.05)
    assert out.exit_code == 0 and changed == [] and out.first_measurement == []
    perf = [c for c in out.cases if c.kind == "performance"]
    assert len(perf) == 10 and all(c.reference_us == pytest.approx(100 / 1.32) for c in perf)


def test_slowed_kernel_exits_2(gpu_run, project):
    out, _ = run_regress([get_op("gdn_prefill", project)], FakeMeasurer(factor=1.2), 0.05)
    assert out.exit_code == 2 and len(out.failures("performance")) == 10


def test_wrong_kernel_exits_1_and_is_not_timed(gpu_run, project):
    out, _ = run_regress([get_op("gdn_prefill", project)], FakeMeasurer(factor=2, wrong={"E1"}), 0.05)
    assert out.exit_code == 1 and [c.shape for c in out.failures("correctness")] == ["E1"]
    assert {c.status for c in out.cases if c.kind == "performance"} == {"skipped"}


def test_new_device_model_records_a_first_measurement(gpu_run, project):
    op = get_op("gdn_prefill", project)
    out, changed = run_regress([op], FakeMeasurer(name="fake B200", factor=0.5), 0.05)
    assert out.exit_code == 0 and out.first_measurement == ["gdn_prefill"]
    assert changed == [project / "kernels/gdn_prefill/promoted.json"] and "commit it" in out.summary()
    meta = json.loads(changed[0].read_text())
    assert meta["devices"]["fake B200"]["times_us"]["G1"] == pytest.approx(50 / 1.32)
    assert meta["times_us"]["G1"] == pytest.approx(100 / 1.32)  # the promotion's own numbers are untouched
    with pytest.raises(gitops.GitError, match="uncommitted edits"):  # not committed: the user decides
        gitops.check_clean(project, "gdn_prefill")
    again, changed2 = run_regress([op], FakeMeasurer(name="fake B200", factor=0.6), 0.05)
    assert changed2 == [] and again.exit_code == 2  # now judged against the recorded B200 numbers


def test_no_record_writes_nothing(gpu_run, project):
    out, changed = run_regress([get_op("gdn_prefill", project)], FakeMeasurer(name="fake B200"), 0.05, record=False)
    assert changed == [] and "--no-record" in out.summary() and out.exit_code == 0


def test_without_a_promoted_kernel_the_baseline_is_checked(project):
    out, changed = run_regress([get_op("gdn_prefill", project)], FakeMeasurer(), 0.05)
    assert out.exit_code == 0 and changed == [] and "no promoted kernel: checked the baseline" in out.summary()


def test_cpu_gates_smoke_and_edge_and_says_timing_was_skipped(gpu_run, project):
    m = FakeMeasurer(name="cpu (Triton interpreter)", gpu=False)
    out, _ = run_regress([get_op("gdn_prefill", project)], m, 0.05)
    assert m.gated == [["smoke", "edge"]] and out.exit_code == 0
    assert "timing skipped" in out.summary()


def test_hand_edited_promoted_kernel_is_noted(gpu_run, project):
    (project / "kernels/gdn_prefill/promoted.py").write_text(source(1.32, tag="edited"))
    out, _ = run_regress([get_op("gdn_prefill", project)], FakeMeasurer(), 0.05)
    assert "differs from the code hash" in out.summary()


def test_worker_measurer_times_through_the_door(monkeypatch, project):
    """The real measurer's bench: one bench_worker task through aka.evaluate.parent.door, eager medians per kernel,
    and the untimed cells (error or skip) as one line; a failed worker is the door's one-line error."""
    from bench_values import bench_value

    from aka.evaluate.parent import door
    from aka.report.regress import WorkerMeasurer

    rows = [{"shape": "G1", "results": {"kernel": {"eager": {"median_us": 10.0}}, "baseline": {"error": "boom"}}},
            {"shape": "G2", "results": {"kernel": {"skipped": "no fla"}, "baseline": {"eager": {"median_us": 12.0}}}}]
    calls = []

    def fake_call(task, payload, timeout, interpreter):
        calls.append((task, [i.name for i in payload.impls], payload.graph, timeout, interpreter))
        return True, bench_value(rows).model_dump(), ""

    monkeypatch.setattr(door, "call", fake_call)
    m = WorkerMeasurer(timeout_s=5.0, interpreter=False)
    op = get_op("gdn_prefill", project)
    kernels = {"kernel": Path("k.py"), "baseline": Path("b.py")}
    assert m.bench(op, kernels, "full") == ({"kernel": {"G1": 10.0}, "baseline": {"G2": 12.0}},
                                            "baseline G1: boom; kernel G2: no fla")
    assert calls == [("aka.evaluate.checker.verify:bench_worker", ["kernel", "baseline"], False, 5.0, False)]
    monkeypatch.setattr(door, "call", lambda *a: (False, None, "timeout: no result within 5 s"))
    assert m.bench(op, kernels, "full") == ({}, "timeout: no result within 5 s")


# ---------------------------------------------------------------------------------------------
# JUnit


def _mixed():
    return classify([check(times={"G1": 100.0, "G2": 300.0, "G3": 50.0}, recorded=REC),
                     check(times=None, skip_reason="timing skipped: no GPU").model_copy(update={"op": "fa4_decode"})],
                    0.05)


def test_junit_validates_and_names_shapes():
    text = junit_xml(_mixed(), "NVIDIA H200")
    SCHEMA.validate(text)
    root = ET.fromstring(text)
    cases = root.findall(".//testcase")
    assert len(cases) == 2 * 2 * 3  # ops x kinds x shapes
    fails = root.findall(".//testcase/failure/..")
    assert [c.get("name") for c in fails] == ["gdn_prefill[G2]"]
    assert "+50.0% against the recorded" in fails[0].find("failure").get("message")
    assert len(root.findall(".//testcase/skipped")) == 3 and root.get("failures") == "1"


def test_schema_rejects_what_ci_would_reject():  # the validator can fail: a testcase without a name
    text = junit_xml(_mixed()).replace('testcase name="gdn_prefill[G1]"', "testcase")
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate(text)
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate(junit_xml(_mixed()).replace('tests="3"', 'tests="three"', 1))


def test_numbers_recorded_in_another_timing_are_not_compared(gpu_run, project):
    """An op that ranks on graph replay: the promotion's eager numbers (a graph replay always beats an
    eager call with its host time) make a first measurement in graph timing, not a comparison."""
    yaml_path = project / "workloads" / "gdn_prefill.yaml"
    yaml_path.write_text(yaml_path.read_text() + "rank_timing: graph\n")
    from aka.contract.ops import Op, load_contract

    op = Op(load_contract(yaml_path), project)  # get_op keeps the contract the loop run loaded
    out, changed = run_regress([op], FakeMeasurer(factor=1.2), 0.05)  # 20% over the eager record: no alarm
    assert out.exit_code == 0 and out.first_measurement == ["gdn_prefill"]
    entry = json.loads(changed[0].read_text())["devices"]["fake H200"]
    assert entry["timing"] == "graph" and entry["times_us"]["G1"] == pytest.approx(120 / 1.32)
    again, _ = run_regress([op], FakeMeasurer(factor=1.3), 0.05)  # now judged against the graph record
    assert again.exit_code == 2 and len(again.failures("performance")) == 10
