"""Gate behaviours beyond the red-team files, on tiny hand-written fa4_decode candidates (shape E1)."""

from __future__ import annotations

import pytest

from aka.contract.ops import get_op
from aka.evaluate.parent.check import check_kernel

OP = get_op("fa4_decode")
HEAD = "import torch\n\n\ndef fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):\n"
# E1 has one key per sequence: o is that key's v row, broadcast over the query heads.
CORRECT_E1 = "    v = v_cache[page_table[0, 0].item(), 0]\n    o = v.expand(q.shape[0], q.shape[1], v.shape[-1])\n"

CASES = {
    "correct": (CORRECT_E1 + "    return o.contiguous()\n", None, ""),
    "modifies_input": (CORRECT_E1 + "    o = o.contiguous()\n    q.zero_()\n    return o\n",
                       "check", "E1: round 0: modified its input 'q'"),
    "two_outputs": (CORRECT_E1 + "    return o.contiguous(), o.contiguous()\n", "check",
                    "E1: round 0: returned 2 outputs, expected 1"),
    "raises": ("    raise ValueError('only batch 3')\n", "run", "E1: round 0: raised ValueError: only batch 3"),
    "import_error": ("    return q\nraise RuntimeError('at import')\n", "import",
                     "importing the candidate raised RuntimeError: at import"),
}


@pytest.mark.parametrize("key", list(CASES))
def test_gate_verdicts(tmp_path, key):
    body, stage, reason = CASES[key]
    path = tmp_path / f"{key}.py"
    path.write_text(HEAD + body)
    report = check_kernel(OP, path, shapes="E1", rounds=2, timeout=120, interpreter=True)
    assert (report.passed, report.stage, report.reason) == (stage is None, stage, reason), report.stderr_tail[-600:]
    assert len(report.kernel_sha256) == 64


def test_missing_entry(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("import torch\n")
    report = check_kernel(OP, path, shapes="E1", timeout=120, interpreter=True)
    assert (report.stage, report.reason) == ("import", "the candidate defines no function 'fa4_decode'")


def test_rounds_use_fresh_inputs_and_at_least_two_calls_then_a_warm_one(tmp_path):
    path = tmp_path / "ok.py"
    path.write_text(HEAD + CASES["correct"][0] + "    return o.contiguous()\n")
    report = check_kernel(OP, path, shapes="E1", rounds=1, timeout=120, interpreter=True)
    rounds = report.results[0].rounds
    assert report.passed and report.n_rounds == 3 and len(rounds) == 3
    assert len({r.seed for r in rounds}) == 3
    assert [r.warm for r in rounds] == [False, False, True]
    assert rounds[2].scalars == rounds[1].scalars and rounds[1].scalars  # drawn once, repeated warm


def test_a_kernel_wrong_only_on_its_warm_path_fails_the_warm_round(tmp_path):
    """A per-shape host cache whose hit path is broken: right on every first call with new scalars,
    wrong when the same shape and scale come again. Calls that all differ in scale never see it."""
    body = ("    key = (tuple(q.shape), softmax_scale)\n"
            "    hit = key in SEEN\n"
            "    SEEN.add(key)\n" + CORRECT_E1 +
            "    return (o * 0.5 if hit else o).contiguous()\n")
    path = tmp_path / "warm_broken.py"
    path.write_text("SEEN = set()\n" + HEAD + body)
    report = check_kernel(OP, path, shapes="E1", rounds=2, timeout=120, interpreter=True)
    assert not report.passed and report.stage == "check", report.reason
    assert report.reason.startswith("E1: round 2 (") and "warm" in report.reason, report.reason


def test_warm_of_points_at_the_round_before_the_warm_calls():
    from aka.evaluate.checker.gate import warm_of

    assert [warm_of(r, 3, 10, 2) for r in range(3)] == [None, None, (1, 10 + 1_000_003 + 202)]
    assert warm_of(0, 1, 10, 0) is None  # a lone call repeats nothing


def test_scalars_are_drawn_from_round_one_in_their_contract_range():
    from aka.evaluate.checker.gate import draw_scalars

    spec = get_op("fa4_prefill").spec
    assert draw_scalars(spec, 0, 123) == {}  # round 0: the default path
    draws = [draw_scalars(spec, 1, s)["softmax_scale"] for s in range(50)]
    assert all(0.03 <= d <= 0.15 for d in draws) and len(set(draws)) > 40
    assert draw_scalars(spec, 2, 7) == draw_scalars(spec, 2, 7)


def test_a_case_that_sets_a_knob_fails_a_candidate_whose_entry_does_not_take_it(tmp_path):
    gdn = get_op("gdn_prefill")
    path = tmp_path / "no_knob.py"
    src = gdn.path("baseline").read_text()
    old = "initial_state=None, scale=None, cp_segment_chunks=None):"
    assert src.count(old) == 1
    path.write_text(src.replace(old, "initial_state=None, scale=None):").replace(
        "CONFIG, cp_segment_chunks)", "CONFIG)"))
    report = check_kernel(gdn, path, shapes="E8", rounds=2, timeout=300, interpreter=True)
    assert report.stage == "check" and "does not take the contract's knob 'cp_segment_chunks'" in report.reason, \
        report.reason


def test_an_honest_screen_checks_its_timed_outputs(tmp_path):
    from aka.evaluate.parent.evaluator import RealEvaluator
    from aka.settings import OptimizeSettings

    ev = RealEvaluator(OP, OptimizeSettings(op=OP.name, interpreter=True))
    gate, bench = ev.screen(OP.path("baseline"), ["smoke"], 2, 0, "smoke")
    assert not gate.error and bench is not None and not bench.error, (gate.error, bench)
    assert set(bench.times_us) == {"S1", "S2"}


_CALLS_E1 = "\n_N = [0]\n\n\n" + HEAD + CORRECT_E1 + (
    "    _N[0] += 1\n    return o.contiguous() if _N[0] != 2 else o.contiguous().zero_()\n")


def test_a_repeat_on_the_same_inputs_is_checked_like_the_round(tmp_path):
    """On a GPU a source that orders its programs with atomics gets each round's call repeated on the same
    inputs (the candidate's process reuses them, no new files); a wrong repeat fails the round and says so.
    Here on CPU through check_case directly: the second call (the first repeat) is wrong."""
    import time

    from aka.evaluate.checker.gate import _load, check_case
    from aka.evaluate.checker.sandbox import new_host

    path = tmp_path / "second_call_wrong.py"
    path.write_text(_CALLS_E1)
    with new_host() as host:
        deadline = time.monotonic() + 120
        _load(host, str(path), OP.spec.entry, deadline)
        res = check_case(host, OP, OP.cases("E1")[0], 0, 0, 3, "cpu", deadline, repeats=2)
    assert not res.passed
    assert res.reason.startswith("round 0: repeat 1 of 2 on the same inputs: o: "), res.reason
