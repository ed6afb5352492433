"""kernels/fa4_prefill/gluon.py (the Gluon FA3-style candidate) passes the static policy that runs before any
candidate code does. Its kernel needs sm_90a and Triton's Gluon (no interpreter): compiled offline by
scripts/device/fa4_gluon_compile.py, checked and timed on the device machine by `aka check` / `aka bench`."""

from __future__ import annotations

from aka.contract.ops import get_op
from aka.evaluate.static.policy import check_source


def test_the_gluon_candidate_passes_the_static_policy():
    op = get_op("fa4_prefill")
    path = op.root / "kernels" / "fa4_prefill" / "gluon.py"
    report = check_source(path.read_text(), op.spec)
    assert report.ok, report.message
