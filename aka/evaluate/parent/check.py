"""The gate from aka's parent process: ``check_kernel`` runs the static policy, then the checker's
``gate_worker`` (aka.evaluate.checker.gate) in a fresh worker process through aka.evaluate.parent.door,
and reads its report. What the checker does is in aka.evaluate.checker.gate; the payload and the
report are aka.evaluate.wire's.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from aka.evaluate.wire import DEFAULT_ROUNDS, TIMEOUT_S, GatePayload, GateReport

GRACE_S = 60.0  # the runner's kill comes this long after the gate's own deadline (startup, report)


def check_kernel(op, kernel: Path, *, shapes: str = "auto", rounds: int = DEFAULT_ROUNDS, seed: int = 0,
                 timeout: float = TIMEOUT_S, interpreter: bool | None = None, fail_fast: bool = False,
                 policy: bool = True, coverage: bool = False) -> GateReport:
    """Policy check, then the gate in a fresh worker. Never raises for anything the candidate does.

    ``policy=False`` skips the static check: only the red-team tests use it, to prove that the
    isolated gate alone rejects what the policy would have refused."""
    from aka.evaluate.parent import door
    from aka.evaluate.static.policy import check_source

    source = Path(kernel).read_text()
    head = dict(op=op.name, kernel=str(kernel), kernel_sha256=hashlib.sha256(source.encode()).hexdigest(),
                shapes=shapes)
    report = check_source(source, op.spec)
    if policy and not report.ok:
        return GateReport(**head, passed=False, stage="policy", reason=str(report.violations[0]),
                          violations=[str(v) for v in report.violations], summary=f"policy: {report.violations[0]}")
    payload = GatePayload(op=op.name, root=str(op.root), kernel=str(Path(kernel).resolve()), shapes=shapes,
                          rounds=rounds, seed=seed, fail_fast=fail_fast, timeout_s=timeout, coverage=coverage)
    res = door.run("aka.evaluate.checker.gate:gate_worker", payload.model_dump(), timeout=timeout + GRACE_S,
                   interpreter=interpreter)
    if not res.ok:
        return GateReport(**head, passed=False, stage=res.stage, reason=res.error, stderr_tail=res.stderr_tail,
                          duration_s=res.duration_s, summary=f"{res.stage}: {res.error}")
    report = GateReport.model_validate(res.value)
    return report.model_copy(update=dict(kernel_sha256=head["kernel_sha256"], duration_s=res.duration_s,
                                         stderr_tail=report.stderr_tail or res.stderr_tail))
