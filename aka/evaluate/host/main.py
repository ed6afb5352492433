"""The candidate's process: ``python -m aka.evaluate.host.main REQ_FD RESP_FD EXCHANGE_DIR PARENT_PID``.

Started by the checker (aka.evaluate.checker.sandbox.Host); the only process in which candidate code ever runs
during a gate or a timing. It answers one JSON request per line on RESP_FD:

- ``load``: import the candidate module (its entry function must exist);
- ``call``: read the inputs from the exchange folder into the buffers the previous call of the shape was
  handed (fresh values at the same addresses, as a serving engine's KV cache stays put: a result
  memoised by address comes back and fails the aliasing check), call the candidate once (allocator poisoned
  with NaN first, launches recorded), check what only this side can see (a tensor subclass, the
  device, storage shared with an input, work left on a side stream, a modified input), write the
  outputs to the exchange folder;
- ``task``: run one of aka's timing harnesses here (aka.evaluate.host.harness), beside the candidate;
- ``exit``.

Nothing the candidate does here (patching torch, aka or the interpreter, threads, reading frames)
reaches the checker, which computes the references and every verdict in its own process from the
bytes this side writes. The candidate's prints go to the log on stdout; the control pipe is a
separate descriptor. The process dies with its parent (PR_SET_PDEATHSIG on Linux).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from aka.evaluate.exchange import TensorRef
from aka.evaluate.lifeline import arm_death_signal
from aka.evaluate.wire import (
    HOST_REQUEST,
    CallRequest,
    ExpectedOutput,
    HostAnswer,
    HostRequest,
    LoadRequest,
    TaskRequest,
    call_typed,
)

_FATAL = ("oom", "device-fault")
HOLD_MAX = 96  # outputs held for the aliasing check: 4 calls a shape, 36 with the GPU repeats, of 1-2 outputs


class _Session:
    def __init__(self, folder: Path):
        self.folder = folder
        self.module = None
        self.fn = None
        self.own_kernels: set[str] = set()
        self.device = "cpu"
        self.held: list = []  # earlier calls' outputs of this shape, with copies of their values (_held_problem)
        self.inputs: dict | None = None  # the last call's inputs as handed over (a ``reuse_inputs`` call's)
        self.handed: dict = {}  # the tensors the last call handed the candidate: the next call's buffers


def _load(s: _Session, req: LoadRequest) -> HostAnswer:
    from aka.contract.ops import NotAModuleError, load_module
    from aka.evaluate.wire import TaskFailure, one_line

    path = Path(req.kernel)
    try:  # one candidate per host process (aka.evaluate.checker.sandbox.new_host), so one fixed module name
        module = load_module(path, "aka_candidate")
    except NotAModuleError as exc:
        raise TaskFailure("import", str(exc)) from exc
    except Exception as exc:
        raise TaskFailure("import", f"importing the candidate raised {one_line(exc)}") from exc
    fn = getattr(module, req.entry, None)
    if not callable(fn):
        raise TaskFailure("import", f"the candidate defines no function '{req.entry}'")
    s.module, s.fn = module, fn
    from aka.evaluate.host import loader

    loader.adopt(str(path.resolve()), module)  # a timing in this process times this very module (its state too)
    # names of CUDA kernels the candidate itself defines (--lang cuda): its own, not a library's
    s.own_kernels = set(re.findall(r"__global__\s+(?:void\s+)?(\w+)", path.read_text()))
    return HostAnswer(ok=True)


def _tensors(s: _Session, refs: dict[str, TensorRef | None], device: str) -> dict[str, Any]:
    from aka.evaluate.exchange import get

    return {k: (None if r is None else get(r, s.folder, device)) for k, r in refs.items()}


def missing_knob(fn, knobs: dict[str, Any]) -> str | None:
    """The first knob the entry point cannot take as a keyword argument, None when it takes them all."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None  # no signature to read: the call itself will say
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return next((k for k in knobs if k not in params or params[k].kind is params[k].POSITIONAL_ONLY), None)


def _call(s: _Session, req: CallRequest) -> HostAnswer:
    import torch

    from aka.evaluate.exchange import dtype_name, put
    from aka.evaluate.host.launches import Recorder, problem

    device = req.device
    if req.reuse_inputs and s.inputs is not None:  # the gate's repeats: the previous call's inputs again,
        inputs = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in s.inputs.items()}  # no file reads
    else:
        inputs = _tensors(s, req.inputs, device)
    inputs = _same_buffers(s.handed, inputs)
    s.handed = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    pristine = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    s.inputs = {**inputs, **pristine}  # a copy the candidate never sees
    if (knob := missing_knob(s.fn, req.knobs)) is not None:
        return HostAnswer(ok=True, problem=f"the entry point does not take the contract's knob {knob!r} (a keyword "
                          "argument every candidate accepts; the edge cases reach code paths through it)")
    expected = req.expected
    _poison(expected, device)
    _sync(device)
    with Recorder(profile_device=req.profile and device == "cuda") as rec:
        raw = s.fn(**inputs, **req.scalars, **req.knobs)
    snap = _snapshot(raw) if device == "cuda" else None  # queued on the current stream, before the sync
    _sync(device)
    outs, why = _normalise(raw, len(expected))
    why = why or _structure(outs, expected, inputs, device) or _stream_problem(outs, snap, expected)
    why = why or _input_problem(inputs, pristine) or _held_problem(s.held, outs, expected)
    launches = rec.launches
    why = why or problem(launches, s.own_kernels)
    if why:
        return HostAnswer(ok=True, problem=why, launches=launches)
    refs = [put(o, s.folder, f"out{i}.bin") for i, o in enumerate(outs)]
    s.held = _hold(s.held, expected, outs)
    return HostAnswer(ok=True, outputs=refs, dtypes=[dtype_name(o) for o in outs], launches=launches)


def _task(s: _Session, req: TaskRequest) -> HostAnswer:
    s.held, s.inputs, s.handed = [], None, {}  # the gate's copies leave the device memory to the timing
    module_name, _, fn_name = req.task.partition(":")
    if not module_name.startswith("aka."):
        raise ValueError(f"task {req.task!r}: only aka's own harnesses run here")
    fn = getattr(importlib.import_module(module_name), fn_name)
    return HostAnswer(ok=True, value=call_typed(fn, {**req.payload, "exchange_dir": str(s.folder)}))


def _same_buffers(previous: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """Each input tensor's values copied into the previous call's tensor of that name where shape,
    strides, dtype and device agree: a kernel keyed on input addresses (a descriptor cache, or a cheat
    that memoises its output) meets the same addresses with new values, as it would in a server."""
    out = dict(inputs)
    for k, v in inputs.items():
        p = previous.get(k)
        if (p is not None and v is not None and hasattr(v, "stride") and p.shape == v.shape
                and p.stride() == v.stride() and p.dtype == v.dtype and p.device == v.device):
            out[k] = p.copy_(v)
    return out


def _normalise(raw, n: int) -> tuple[list, str]:
    """Single-output ops may return one tensor; others a tuple/list of n outputs."""
    import torch

    outs = [raw] if isinstance(raw, torch.Tensor) and n == 1 else raw
    if not isinstance(outs, (tuple, list)):
        return [], f"returned {type(raw).__name__}, expected {n} output tensor(s)"
    if len(outs) != n:
        return [], f"returned {len(outs)} outputs, expected {n}"
    return list(outs), ""


def _structure(outs: list, expected: list[ExpectedOutput], inputs: dict[str, Any], device: str) -> str:
    """What the checker cannot see from bytes: the object returned, where it lives, what it aliases."""
    import torch

    from aka.evaluate.exchange import dtype_name

    for out, exp in zip(outs, expected):
        name = exp.name
        if not isinstance(out, torch.Tensor):
            return f"{name}: returned {type(out).__name__}, expected a tensor"
        if type(out) is not torch.Tensor:  # a subclass could answer the checks' own torch calls
            return f"{name}: returned a {type(out).__name__}, a torch.Tensor subclass; return a plain tensor"
        if tuple(out.shape) != tuple(exp.shape):
            return f"{name}: shape {tuple(out.shape)} != expected {tuple(exp.shape)}"
        if dtype_name(out) != exp.dtype:
            return f"{name}: dtype {dtype_name(out)} != {exp.dtype}"
        if out.device.type != torch.device(device).type:
            return f"{name}: on device {out.device.type}, expected {device}"
        try:
            ptr = out.untyped_storage().data_ptr()
        except RuntimeError:
            continue
        for k, v in inputs.items():
            if isinstance(v, torch.Tensor) and v.numel() and v.untyped_storage().data_ptr() == ptr:
                return f"{name}: returns input '{k}' (shares its storage)"
    return ""


def _span(t) -> tuple[int, int]:
    """[start, end) of the bytes a tensor's storage spans."""
    st = t.untyped_storage()
    return st.data_ptr(), st.data_ptr() + st.nbytes()


def _hold(held: list, expected: list[ExpectedOutput], outs: list) -> list:
    """Every output of the calls of one shape stays held (a new shape starts over; at most HOLD_MAX): a
    kernel that rotates a few buffers per shape fails once the rotation comes back to a held one."""
    sig = [(e.name, tuple(e.shape)) for e in expected]
    kept = [h for h in held if h[0] == sig]
    kept += [(sig, exp.name, o, o.clone()) for exp, o in zip(expected, outs)]
    return kept[-HOLD_MAX:]


def _held_problem(held: list, outs: list, expected: list[ExpectedOutput]) -> str:
    """A caller keeps the outputs of one call while it makes the next (two layers, two requests): each
    new output must own fresh storage, and the earlier calls' outputs must keep their values. A kernel
    that hands back one buffer per shape (or a few in turn) is right on every single call and wrong for
    such a caller."""
    for exp, out in zip(expected, outs):
        lo, hi = _span(out)
        for _, name, old, _ in held:
            o_lo, o_hi = _span(old)
            if lo < o_hi and o_lo < hi and out.numel() and old.numel():
                return (f"{exp.name}: shares storage with an earlier call's output '{name}' (aliasing: a "
                        "caller holding both sees one overwritten; allocate every output per call)")
    for _, name, old, copy in held:
        if not _same(old, copy):
            return (f"an earlier call's output '{name}' changed during this call (aliasing: a caller "
                    "holding both sees one overwritten; allocate every output per call)")
    return ""


def _poison(expected: list[ExpectedOutput], device: str) -> None:
    """Allocate NaN-filled blocks of the outputs' sizes and free them: the allocator hands them out next,
    so a half-written output cannot inherit correct bytes."""
    import torch

    blocks = [torch.full(tuple(e.shape), float("nan"), dtype=getattr(torch, e.dtype), device=device)
              for e in expected if getattr(torch, e.dtype).is_floating_point]
    del blocks


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()  # every stream of the device, not only the current one


def _snapshot(raw):
    import torch

    items = raw if isinstance(raw, (tuple, list)) else (raw,)
    return [t.clone() if isinstance(t, torch.Tensor) else None for t in items]


class _Same:
    """Bitwise equality (NaN equal to NaN) through torch functions saved before the candidate loads,
    so a candidate that patches torch.isnan or Tensor.__eq__ cannot fake its own hygiene checks."""

    def __init__(self):
        import torch

        self.eq, self.isnan, self.or_, self.and_, self.all = (torch.eq, torch.isnan, torch.logical_or,
                                                              torch.logical_and, torch.all)
        self.equal, self.tensor = torch.equal, torch.Tensor

    def __call__(self, a, b) -> bool:
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if not a.is_floating_point():
            return bool(self.equal(a, b))
        return bool(self.all(self.or_(self.eq(a, b), self.and_(self.isnan(a), self.isnan(b)))))


_SAME: _Same | None = None


def _same(a, b) -> bool:
    return _SAME(a, b)


def _stream_problem(outs: list, snap, expected: list[ExpectedOutput]) -> str:
    """Outputs that changed between the current-stream snapshot and the device sync were written by
    work the caller's stream does not wait for (a side stream)."""
    nan_equal = _same
    if snap is None:
        return ""
    for exp, now, then in zip(expected, outs, snap):
        if then is not None and now.shape == then.shape and not nan_equal(now, then):
            return f"{exp.name}: changed after the device was synchronised (work left on another stream)"
    return ""


def _input_problem(inputs: dict[str, Any], pristine: dict[str, Any]) -> str:
    for k, v in pristine.items():
        if not _same(inputs[k], v):
            return f"modified its input '{k}'"
    return ""


_HANDLERS = {"load": _load, "call": _call, "task": _task}


def _answer(s: _Session, raw: object) -> HostAnswer:
    """The answer to one request line's object (parsed here: one that is no request fails like a raise)."""
    from aka.evaluate.wire import failure

    try:
        req: HostRequest = HOST_REQUEST.validate_python(raw)
        return _HANDLERS[req.cmd](s, req)
    except BaseException as exc:  # the checker records it; nothing escapes the host
        failed = failure(exc)
        return HostAnswer(ok=False, stage=failed.stage, error=failed.error)


def main(argv: list[str]) -> None:
    import faulthandler

    faulthandler.enable()  # a segfault leaves a Python traceback in the log
    req_fd, resp_fd, folder, parent = int(argv[0]), int(argv[1]), Path(argv[2]), int(argv[3])
    arm_death_signal(parent)
    from aka.evaluate.host.interp import setup_interpreter

    session = _Session(folder)
    setup_interpreter(os.environ.get("AKA_WORKER_INTERPRETER", "auto"))
    global _SAME
    _SAME = _Same()
    requests = os.fdopen(req_fd, "r", encoding="utf-8")
    answers = os.fdopen(resp_fd, "w", encoding="utf-8")
    for line in requests:
        raw = json.loads(line)
        if isinstance(raw, dict) and raw.get("cmd") == "exit":
            break
        ans = _answer(session, raw)
        try:
            text = json.dumps(ans.model_dump())
        except (TypeError, ValueError) as exc:
            ans = HostAnswer(ok=False, stage="run", error=f"answer is not JSON-serialisable: {exc}")
            text = json.dumps(ans.model_dump())
        sys.stdout.flush()
        answers.write(text + "\n")
        answers.flush()
        if not ans.ok and ans.stage in _FATAL:
            break  # the CUDA context (or the allocator) is gone: never reuse it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # a device left faulted by a candidate cannot hang interpreter teardown


if __name__ == "__main__":
    main(sys.argv[1:])
