"""FlashInfer-Bench traces from aka's own records: one PASSED trace per recorded timing of a
full-set case (aka.interop.recorded finds them), with aka's gate errors beside FlashInfer-Bench's
fields that aka does not measure (NaN, said so in each trace)."""

from __future__ import annotations

import math

from aka.interop import recorded
from aka.interop.fib_models import (
    Correctness,
    Definition,
    Environment,
    Evaluation,
    Performance,
    Solution,
    Trace,
    Workload,
)


def fib_hardware(device: str) -> str:
    return device.replace(" ", "_")  # FlashInfer-Bench's spelling: NVIDIA_H100


_ERROR_NOTE = ("aka's gate compares with a float64 reference by rel L2 and max error over max |ref| (tolerances in "
               "the contract); FlashInfer-Bench's elementwise max errors were not measured: NaN")


def build_traces(definition: Definition, sol: Solution, workloads: dict[str, Workload],
                 found: list[recorded.Measurement]) -> tuple[list[Trace], list[str]]:
    """One PASSED trace per recorded timing of a full-set case; also which measurements were used."""
    out, used = [], []
    for m in found:
        n0 = len(out)
        for case_id, us in m.times_us.items():
            if case_id not in workloads or not us or us <= 0:
                continue
            errs = m.gate_errors.get(case_id) or {}
            extra = {"aka_case": case_id, "aka_gate_sets": m.gate_sets, "note": _ERROR_NOTE,
                     **({"aka_rel_l2": {o: e.get("rel_l2") for o, e in errs.items()},
                         "aka_plain_rel_l2": {o: e.get("plain_rel_l2") for o, e in errs.items()}} if errs else {})}
            vs = m.speedup_vs_baseline.get(case_id)
            log = (f"aka, {m.source}: eager median {us:.1f} us (L2 flushed, fresh inputs every call)"
                   + (f"; {vs:.3f}x aka's baseline" if vs else "")
                   + "; reference_latency_ms and speedup_factor are 0: aka does not time the definition's reference")
            out.append(Trace(definition=definition.name, workload=workloads[case_id], solution=sol.name,
                             evaluation=Evaluation(
                                 status="PASSED", environment=Environment(hardware=fib_hardware(m.device), libs=m.libs),
                                 timestamp=m.timestamp, log=log,
                                 correctness=Correctness(max_relative_error=math.nan, max_absolute_error=math.nan,
                                                         extra=extra),
                                 performance=Performance(latency_ms=us / 1000.0))))
        if len(out) > n0:
            used.append(f"{m.source} on {m.device}: {len(out) - n0} trace(s)")
    return out, used


# -- the command ---------------------------------------------------------------------------------
