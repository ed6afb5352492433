"""Gate behaviours beyond the red-team files, on tiny hand-written fa4_decode candidates (shape E1)."""

from __future__ import annotations

import pytest

from aka.gate import check_kernel
from aka.ops import get_op

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


def test_rounds_use_fresh_inputs_and_at_least_two_calls(tmp_path):
    path = tmp_path / "ok.py"
    path.write_text(HEAD + CASES["correct"][0] + "    return o.contiguous()\n")
    report = check_kernel(OP, path, shapes="E1", rounds=1, timeout=120, interpreter=True)
    rounds = report.results[0].rounds
    assert report.passed and report.n_rounds == 2 and len(rounds) == 2
    assert rounds[0].seed != rounds[1].seed
