"""An op whose calls replay CUDA graphs it keeps per argument key: the host cost of one graph launch a call
instead of one Python launch a kernel, for callers that keep their buffers where they are.

    from aka.graphed import graphed
    gdn = graphed(module.gdn_prefill)   # module: a kernel file aka ships or promoted
    o, ht = gdn(q=q, k=k, v=v, ...)     # first call with these buffers: eager; second: captured; then replayed

The key of a call is every tensor argument's address, shape, strides and dtype and every other argument's
value. The first call with a key runs ``fn`` as it is (Triton compiles, caches fill); the second captures
it into a CUDA graph and replays it; later ones replay it. A graph reads its inputs where they were at
capture, so new values written into the same buffers are what it computes on; anything ``fn`` reads besides
its arguments (a module's CONFIG, a host copy of a tensor's values) is what it was at capture.

What the caller allows by wrapping (the terms of torch.compile's mode="reduce-overhead"): a call returns
the graph's own output tensors, and the next call with the same key writes into them. Clone an output that
must outlive that call. Calls that cannot be graphed run eagerly, every time: a CPU tensor or an argument
aka cannot key among the arguments, a capture that failed (a host sync inside ``fn``), or a call made while
the caller's stream is itself being captured (the caller's graph then holds ``fn``'s launches).

A caller whose every call passes the very same arguments (a serving engine's static buffers) can bind
them once: ``step = gdn.bind(q=q, k=k, ...)`` computes the key there, and ``step()`` replays the graph
without keying the arguments again. Keying is most of the wrapper's host time: 2.9 µs for five tensors
and a scalar on this project's CI machine (2026-12-07), where a replay is about 3 µs on a GPU host. The
bound tensors must keep their address, shape, strides and dtype while the call is used (an in-place
``resize_``, ``set_`` or ``as_strided_`` on one of them breaks that; the call holds them, so they are
never freed under it). A bound call goes through the op's key table on its first calls, and whenever the
op dropped its graph, so it shares the op's graphs and the op's ``max_graphs``.

This is a caller's wrapper and not a candidate's: the static policy keeps graphs out of kernel files, so
the loop times and ranks kernels on their own launches (`aka bench --impl baseline@graph` times this path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_SCALARS = (int, float, bool, str, type(None))
_MAX_KEYS = 4096  # keys remembered as seen once or as not capturable (the graphs themselves: max_graphs)


def call_key(args: tuple, kwargs: dict, on_gpu: Callable[[Any], bool] | None = None) -> tuple | None:
    """The graph key of a call (pure): per tensor (address, shape, strides, dtype), per other argument
    its value; None when the call cannot be graphed (a tensor off the GPU, an argument of another type).
    on_gpu: whether a tensor counts as on the GPU (None: its is_cuda)."""
    import torch

    tensor, parts = torch.Tensor, []
    for name, value in enumerate(args):
        part = _part(name, value, tensor, on_gpu)
        if part is None:
            return None
        parts.append(part)
    for name, value in kwargs.items():
        part = _part(name, value, tensor, on_gpu)
        if part is None:
            return None
        parts.append(part)
    return tuple(parts)


def _part(name, value, tensor, on_gpu):
    if isinstance(value, tensor):
        if not (value.is_cuda if on_gpu is None else on_gpu(value)):
            return None
        return (name, value.data_ptr(), value.shape, value.stride(), value.dtype)
    if isinstance(value, _SCALARS):
        return (name, type(value), value)  # 1 and 1.0 and True are different calls
    return None


_SEEN, _EAGER = "seen", "eager"  # a key called once (eagerly: the next call captures); a key whose capture failed


class GraphedOp:
    """``fn`` behind per-key CUDA graphs (module docstring). ``max_graphs``: graphs kept, least recently
    used dropped first (each holds its own memory pool: ``fn``'s outputs and scratch at that key)."""

    _on_gpu = None  # whether a tensor counts as on the GPU (None: its is_cuda; the CPU tests stand in)

    def __init__(self, fn: Callable[..., Any], max_graphs: int = 8):
        if max_graphs < 1:
            raise ValueError(f"max_graphs={max_graphs}: keep at least one graph")
        self.fn, self.max_graphs = fn, max_graphs
        # key -> _SEEN, _EAGER or [graph, its outputs, the call count at its last use]: one lookup a call
        self._keys: dict[tuple, Any] = {}
        self._n_graphs = 0
        self.captures = self.replays = self.eager_calls = 0
        self._new_graph, self._capturing_into, self._capturing = self._cuda_graphs()  # looked up once, not a call

    @staticmethod
    def _cuda_graphs():
        """(CUDAGraph, the capture context, whether the current stream is capturing): torch's."""
        import torch

        return torch.cuda.CUDAGraph, torch.cuda.graph, torch.cuda.is_current_stream_capturing

    def __call__(self, *args, **kwargs):
        key = call_key(args, kwargs, self._on_gpu)
        state = None if key is None else self._keys.get(key)
        if state.__class__ is list and not self._capturing():  # the common case, first
            state[2] = self.replays = self.replays + 1
            state[0].replay()
            return state[1]
        if key is None or state is _EAGER or self._capturing():
            self.eager_calls += 1
            return self.fn(*args, **kwargs)
        if state is None:  # first call: compiles and caches fill outside any capture
            if len(self._keys) - self._n_graphs >= _MAX_KEYS:  # new buffers every call: forget, do not grow
                self._keys = {k: v for k, v in self._keys.items() if v.__class__ is list}
            self._keys[key] = _SEEN
            self.eager_calls += 1
            return self.fn(*args, **kwargs)
        return self._capture(key, args, kwargs)

    def bind(self, *args, **kwargs) -> BoundCall:
        """``fn`` on these arguments as a call without any (module docstring: what the caller promises)."""
        return BoundCall(self, args, kwargs)

    def _capture(self, key: tuple, args: tuple, kwargs: dict):
        graph = self._new_graph()
        try:
            with self._capturing_into(graph):
                out = self.fn(*args, **kwargs)
        except Exception:  # fn cannot be captured (a sync, a host read of device data): eager from now on
            self._keys[key] = _EAGER
            self.eager_calls += 1
            return self.fn(*args, **kwargs)  # fn's own error, if it has one, surfaces here
        if self._n_graphs >= self.max_graphs:  # drop the least recently used graph
            graphs = [(v[2], k) for k, v in self._keys.items() if v.__class__ is list]
            del self._keys[min(graphs, key=lambda t: t[0])[1]]
            self._n_graphs -= 1
        self._keys[key] = [graph, out, self.replays]
        self._n_graphs += 1
        self.captures += 1
        graph.replay()  # capture records the launches; this call's results come from the replay
        return out


class BoundCall:
    """GraphedOp.bind's call: the op on arguments given once. Its key is computed at bind time; a call
    replays the op's graph for that key while the op still holds it, and otherwise (before the capture,
    after the op dropped the graph, inside the caller's own capture) is the op's keyed call."""

    __slots__ = ("_op", "_args", "_kwargs", "_key", "_state")

    def __init__(self, op: GraphedOp, args: tuple, kwargs: dict):
        self._op, self._args, self._kwargs = op, args, kwargs
        self._key = call_key(args, kwargs, op._on_gpu)
        self._state = None  # the op's [graph, outputs, last use] at this key, once it was seen there

    def __call__(self):
        op, state = self._op, self._state
        # the identity check: a graph the op dropped (least recently used) is not replayed from here
        if state is not None and op._keys.get(self._key) is state and not op._capturing():
            state[2] = op.replays = op.replays + 1
            state[0].replay()
            return state[1]
        out = op(*self._args, **self._kwargs)
        if self._key is not None:
            now = op._keys.get(self._key)
            self._state = now if now.__class__ is list else None
        return out


def graphed(fn: Callable[..., Any], max_graphs: int = 8) -> GraphedOp:
    """``fn`` replayed from CUDA graphs kept per argument key (module docstring: what the caller allows)."""
    return GraphedOp(fn, max_graphs)
