"""aka.evaluate.parent.outcomes.gate_record: what the loop keeps of a gate report (and promoted.json shows)."""

from aka.evaluate.parent.outcomes import gate_record
from aka.evaluate.wire import GateReport


def gate_outcome(report: dict):
    """The checker's report as it crosses the process boundary (JSON), read back as the parent does."""
    return gate_record(GateReport.model_validate({"op": "gdn_prefill", "kernel": "k.py", **report}))


def _round(i, ok, o_rel, s_rel, seconds=1.5):
    return {"round": i, "seed": i, "ok": ok, "seconds": seconds, "outputs": [
        {"name": "o", "ok": ok, "rel_l2": o_rel, "plain_rel_l2": 3.6e-3},
        {"name": "final_state", "ok": True, "rel_l2": s_rel, "plain_rel_l2": 3.0e-3}]}


def test_worst_round_errors_and_summed_seconds_are_kept():
    report = {"passed": True, "summary": "2/2 shapes passed", "device": "H200", "n_rounds": 2, "duration_s": 0.0,
              "results": [{"id": "G1", "passed": True, "rounds": [_round(0, True, 3.8e-3, 3.1e-3),
                                                                    _round(1, True, 4.1e-3, 2.9e-3)]},
                          {"id": "G2", "passed": True, "rounds": [_round(0, True, 3.7e-3, 3.2e-3)]}]}
    g = gate_outcome(report)
    assert g.passed == {"G1": [True, True], "G2": [True]} and not g.error
    assert g.errors["G1"] == {"o": {"rel_l2": 4.1e-3, "plain_rel_l2": 3.6e-3},
                                        "final_state": {"rel_l2": 3.1e-3, "plain_rel_l2": 3.0e-3}}
    assert g.errors["G2"]["o"]["rel_l2"] == 3.7e-3
    assert g.seconds == 4.5  # the worker reports no duration of its own


def test_a_failing_round_is_the_worst_even_with_a_smaller_error():
    report = {"passed": False, "reason": "G1: o off", "n_rounds": 2,
              "results": [{"id": "G1", "passed": False, "rounds": [_round(0, True, 9e-3, 3e-3),
                                                                     _round(1, False, 5e-3, 3e-3)]}]}
    g = gate_outcome(report)
    assert g.passed == {"G1": [True, False]} and g.error == "G1: o off"
    assert g.errors["G1"]["o"]["rel_l2"] == 5e-3


def test_a_parent_measured_duration_wins():
    report = {"passed": True, "n_rounds": 1, "duration_s": 12.0,
              "results": [{"id": "S1", "passed": True, "rounds": [_round(0, True, 1e-3, 1e-3)]}]}
    assert gate_outcome(report).seconds == 12.0


def test_bench_outcome_reads_the_incumbent_timed_beside_the_candidate():
    from bench_values import bench_value

    from aka.evaluate.parent.outcomes import bench_outcome

    rows = [{"shape": "G1", "results": {"incumbent": {"eager": {"median_us": 110.0}},
                                        "candidate": {"eager": {"median_us": 100.0}, "roofline_frac": 0.2}}},
            {"shape": "G2", "results": {"candidate": {"eager": {"median_us": 50.0}}}}]
    b = bench_outcome(bench_value(rows))
    assert b.times_us == {"G1": 100.0, "G2": 50.0} and b.incumbent_us == {"G1": 110.0}
    assert b.timing == "gpu" and b.roofline == {"G1": 0.2} and not b.error
