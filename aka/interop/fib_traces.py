"""FlashInfer-Bench traces from aka's own records: one PASSED trace per recorded GPU timing of a
full-set case (aka.interop.recorded finds them) that aka's gate measured the errors of.

What FlashInfer-Bench's `report best` (TraceSet.get_best_trace) keeps: PASSED traces whose
max_absolute_error and max_relative_error are both <= 1e-2; NaN never is. So each trace carries
- max_relative_error: the gate's worst rel L2 (||out - ref|| / ||ref|| against float64) over the
  outputs of that case: a measured relative error, norm-wise where FlashInfer-Bench's is elementwise;
- no max_absolute_error: aka measures none. The key is left out of the JSON (FlashInfer-Bench's model
  then reads its default, 0), and the log's first lines, which `report best` prints, say so;
- latency_ms: the recorded median in ms, its kind named in the log and in correctness.extra.
A case with no gate figure on that device model gets no trace (a PASSED trace without a measured
error would be a claim aka cannot make); an eager timing of a device that also has a graph timing of
the same code is left out (two conventions for one kernel on one device). Each is said in a note.
"""

from __future__ import annotations

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


TIMING_LOG = {
    "graph": "timing: graph (median of CUDA-graph replays, L2 flushed): the kernel's GPU work alone; "
             "FlashInfer-Bench's own run (an eager call between CUDA events) would add the host's launch gaps",
    "eager": "timing: eager (median of eager calls between CUDA events, L2 flushed, device-wide sync): the host's "
             "launch gaps included, as in FlashInfer-Bench's own run (which reports a mean)",
}
ERROR_LOG = ("errors: max_relative_error is aka's worst rel L2 (||out - ref|| / ||ref||, float64 reference) over the "
             "outputs, from {src}; max_absolute_error: not measured, left out (FlashInfer-Bench reads 0)")
# written into each trace's JSON without max_absolute_error (see the module's docstring)
TRACE_EXCLUDE = {"evaluation": {"correctness": {"max_absolute_error"}}}


def _worst_rel_l2(errs: dict[str, dict[str, float | None]]) -> float | None:
    figs = [e.get("rel_l2") for e in errs.values()]
    return max(figs) if figs and all(isinstance(f, (int, float)) and f >= 0 for f in figs) else None


def build_traces(definition: Definition, sol: Solution, workloads: dict[str, Workload],
                 found: list[recorded.Measurement]) -> tuple[list[Trace], list[str], list[str]]:
    """One PASSED trace per recorded timing of a full-set case with a gate figure; also which
    measurements were used and notes on what was left out."""
    out, used, notes = [], [], []
    graphed = {m.device for m in found if m.timing == "graph"}
    for m in found:
        if m.timing == "eager" and m.device in graphed:
            notes.append(f"{m.source}: eager timings on {m.device}, which has graph timings of this code: left out")
            continue
        n0, no_error = len(out), []
        for case_id, us in m.times_us.items():
            if case_id not in workloads or not us or us <= 0:
                continue
            errs = m.gate_errors.get(case_id) or {}
            rel = _worst_rel_l2(errs)
            if rel is None:
                no_error.append(case_id)
                continue
            extra = {"aka_case": case_id, "aka_timing": m.timing, "aka_latency_us": us,
                     **({"aka_host_us": m.host_us[case_id]} if case_id in m.host_us else {}),
                     "aka_gate_sets": m.gate_sets, "aka_errors_from": m.errors_from,
                     "aka_rel_l2": {o: e.get("rel_l2") for o, e in errs.items()},
                     "aka_plain_rel_l2": {o: e.get("plain_rel_l2") for o, e in errs.items()},
                     "note": "max_relative_error: aka's worst rel L2 over the outputs (norm-wise, against float64); "
                             "max_absolute_error: not measured by aka, left out of the record"}
            vs = m.speedup_vs_baseline.get(case_id)
            log = "\n".join([
                f"{us:.1f} us, " + TIMING_LOG[m.timing],
                ERROR_LOG.format(src=m.errors_from or m.source),
                f"measured by aka: {m.source}" + (f"; {vs:.3f}x aka's baseline" if vs else ""),
                "reference_latency_ms and speedup_factor are 0: aka does not time the definition's reference"])
            out.append(Trace(definition=definition.name, workload=workloads[case_id], solution=sol.name,
                             evaluation=Evaluation(
                                 status="PASSED", environment=Environment(hardware=fib_hardware(m.device), libs=m.libs),
                                 timestamp=m.timestamp, log=log,
                                 correctness=Correctness(max_relative_error=rel, extra=extra),
                                 performance=Performance(latency_ms=us / 1000.0))))
        if len(out) > n0:
            used.append(f"{m.source} on {m.device}, {m.timing} timing: {len(out) - n0} trace(s)")
        if no_error:
            notes.append(f"{m.source}: no gate error figure for {', '.join(no_error)} on {m.device}: "
                         f"{len(no_error)} timing(s) left out (FlashInfer-Bench's best-trace filter needs a "
                         "measured error, and aka writes no PASSED trace without one)")
    return out, used, notes
