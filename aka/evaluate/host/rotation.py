"""Fresh inputs for every timed call, and the record of which call saw which inputs.

A kernel timed on the same few input buffers can remember them (a cache keyed on a fingerprint
answers in no time) or count its calls (right for the gate's three, garbage afterwards). So the
timing harness rewrites the input buffer it is about to use before every timed call, untimed, with
the values ``rotated(op, case, base_seed, seed)`` defines, and keeps the outputs of two timed calls
per implementation and shape: one drawn at random among the first ``min_iters`` and the last one.
The checker (aka.evaluate.checker.verify) rebuilds exactly those inputs from the two seeds in its own process and
checks the outputs against the float64 reference.

An op's input module may define ``refresh(case, base, seed)`` (a pure function of the base inputs
and the seed, cheaper than generating everything anew, e.g. for gigabytes of paged KV cache);
without it the inputs are generated anew from ``seed``.
"""

from __future__ import annotations

import random
from typing import Any

from aka.evaluate.wire import Sample


def rotated(op, case, base_seed: int, seed: int, device: str, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The inputs of a timed call whose buffer was refreshed with ``seed``."""
    refresh = getattr(op.inputs, "refresh", None)
    if refresh is None:
        return op.inputs.make_inputs(case, seed, device)
    if base is None:
        base = op.inputs.make_inputs(case, base_seed, device)
    return refresh(case, base, seed)


def _outputs(raw) -> list:
    import torch

    items = raw if isinstance(raw, (tuple, list)) else [raw]
    return [t for t in items if isinstance(t, torch.Tensor)]


class Rotation:
    """Per shape: refreshes the input copy before each timed call and keeps the sampled outputs.

    Each sampled implementation and timing (eager, graph) has a *probe*: one timed call, drawn at
    random among the first ``min_calls``, whose inputs are the same for every implementation of the
    shape (one reference checks them all); with ``last`` the last timed eager call is kept too. The
    candidate cannot tell a probe from any other call: every call gets values it has not seen.
    ``wrap`` makes prepared calls remember their output; ``hooks(name, timing)`` gives the
    (before, after) pair the timing loop runs around each timed call, outside the timed interval.
    """

    def __init__(self, op, case, copies: list[dict[str, Any]], base_seeds: list[int], seed: int, device: str,
                 min_calls: int, sample: set[str], last: bool = False):
        self.op, self.case, self.copies, self.base_seeds, self.device = op, case, copies, base_seeds, device
        self.bases = ([{k: (v.clone() if hasattr(v, "clone") else v) for k, v in c.items()} for c in copies]
                      if getattr(op.inputs, "refresh", None) is not None else [None] * len(copies))
        self.rng = random.Random(seed)
        self.probe_seed = seed * 1_000_000 + 999_999
        self.counter = seed * 1_000_000
        self.min_calls = max(1, min_calls)
        self.sample, self.last = sample, last
        self.kept: list[tuple[Sample, list]] = []
        self._last: dict[tuple[str, str], tuple[Sample, Any]] = {}
        self._holders: dict[str, list] = {}
        # per buffer, which base's tensor each unchanged input currently holds (copy only on a change)
        self._holds: list[dict[str, int | None]] = [dict.fromkeys(c, i) for i, c in enumerate(copies)]
        self.trace: list[tuple[int, int, int, int]] = []  # (call, buffer, base seed, seed) of every refresh

    def _write(self, copy: int, b: int, new: dict[str, Any]) -> None:
        """Put a rotated input set into buffer ``copy``; tensors the refresh left as base b's are copied
        only when the buffer holds another base's (gigabytes of KV cache stay where they are)."""
        base = self.bases[b]
        for k, v in new.items():
            if not hasattr(v, "copy_"):
                continue
            same = base is not None and v is base.get(k)
            if same and self._holds[copy].get(k) == b:
                continue
            self.copies[copy][k].copy_(v)
            self._holds[copy][k] = b if same else None

    def wrap(self, name: str, calls: list) -> list:
        """Calls that remember their last output (a list cell write: no measurable cost)."""
        holder = self._holders.setdefault(name, [None])

        def keep(call):
            def run():
                holder[0] = call()
                return holder[0]
            return run

        return [keep(c) for c in calls]

    def current(self, name: str):
        """The output the last call of ``name`` returned (a graph's static buffers right after capture)."""
        return self._holders[name][0]

    def replays(self, name: str, replays: list, outs: list) -> list:
        """Graph replays that point the holder at their own graph's output buffers."""
        holder = self._holders.setdefault(name, [None])

        def bind(replay, out):
            def run():
                replay()
                holder[0] = out
            return run

        return [bind(r, o) for r, o in zip(replays, outs)]

    def hooks(self, name: str, timing: str):
        probe = self.rng.randrange(self.min_calls) if name in self.sample else -1
        seen: dict[int, tuple[int, int]] = {}

        def before(i: int, copy: int) -> None:
            b = 0 if i == probe else copy  # a probe's inputs do not depend on which buffer it lands in
            if i == probe:
                seed = self.probe_seed
            else:
                self.counter += 1
                seed = self.counter
            self._write(copy, b, rotated(self.op, self.case, self.base_seeds[b], seed, self.device, self.bases[b]))
            seen[i] = (self.base_seeds[b], seed)
            self.trace.append((i, copy, self.base_seeds[b], seed))

        def after(i: int, copy: int) -> None:
            if name not in self.sample:
                return
            out = self._holders[name][0]
            base_seed, seed = seen.pop(i)
            sample = Sample(impl=name, shape=self.case.id, timing=timing, base_seed=base_seed, seed=seed, call=i,
                            outputs=[])
            if i == probe:  # copied: later calls overwrite a graph's output buffers
                self.kept.append((sample, [t.clone() for t in _outputs(out)]))
            elif self.last and timing == "eager":  # graph replays: the probe covers them
                self._last[(name, timing)] = (sample, out)

        return before, after

    def freeze(self, name: str) -> None:
        """Copy the kept last eager output of ``name`` now: for an implementation whose outputs its next
        call may overwrite by its declared terms (aka.graphed, ``NAME@graph``), before the harness calls
        it again (peak memory, graph capture). Kernels are not frozen: one that hands out a buffer a
        later call rewrites is checked on what the buffer holds at the end."""
        hit = self._last.get((name, "eager"))
        if hit is not None:
            self._last[(name, "eager")] = (hit[0], [t.clone() for t in _outputs(hit[1])])

    def finish(self, folder, tag: str) -> list[Sample]:
        """Write the kept outputs to the exchange folder; their descriptions for the checker."""
        from aka.evaluate.exchange import put

        kept = self.kept + [(s, _outputs(out)) for s, out in self._last.values()]
        written = []
        for j, (s, outs) in enumerate(kept):
            refs = [put(t, folder, f"{tag}_{j}_{k}.bin") for k, t in enumerate(outs)]
            written.append(s.model_copy(update={"outputs": refs}))
        return written
