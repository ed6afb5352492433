"""aka.graphed: which calls run eagerly, which capture and which replay (CPU, with a stand-in for torch's
CUDA graphs), the key, and on a GPU the real capture reading new values from the same buffers."""

from __future__ import annotations

import pytest
import torch

from aka.graphed import GraphedOp, call_key


class _Graph:
    replays = 0

    def replay(self):
        _Graph.replays += 1


class _Api:
    """torch.cuda's graph calls as GraphedOp uses them: capture sets a flag the op reads."""

    capturing = False
    fail = False

    def graph(self, g):
        api = self

        class Ctx:
            def __enter__(self):
                api.capturing = True

            def __exit__(self, *exc):
                api.capturing = False
                if api.fail and exc[0] is None:
                    raise RuntimeError("operation not permitted when stream is capturing")
                return False

        return Ctx()


def _op(fn, api: _Api, max_graphs: int = 8) -> GraphedOp:
    class Op(GraphedOp):
        @staticmethod
        def _on_gpu(t):
            return True

        @staticmethod
        def _cuda_graphs():
            return _Graph, api.graph, lambda: api.capturing

    return Op(fn, max_graphs)


def _recording():
    seen: list[bool] = []  # per call of fn: whether it ran inside a capture

    def fn(x, scale=1.0, tag=None):
        seen.append(_API.capturing)
        return x * scale

    return fn, seen


_API = _Api()


@pytest.fixture(autouse=True)
def _fresh_api():
    _API.capturing = _API.fail = False
    _Graph.replays = 0


def test_first_call_eager_second_captures_then_replays():
    fn, seen = _recording()
    op = _op(fn, _API)
    x = torch.ones(4)
    first = op(x, scale=2.0)
    assert seen == [False] and _Graph.replays == 0 and first.tolist() == [2.0] * 4
    second = op(x, scale=2.0)
    assert seen == [False, True] and _Graph.replays == 1 and op.captures == 1
    third = op(x, scale=2.0)
    assert seen == [False, True], "a replay must not run fn"
    assert third is second and _Graph.replays == 2 and op.replays == 1 and op.eager_calls == 1


def test_a_new_buffer_shape_or_scalar_is_a_new_key():
    fn, seen = _recording()
    op = _op(fn, _API)
    x, y = torch.ones(4), torch.ones(4)
    op(x), op(x)
    op(y)  # another address
    op(x, scale=1)  # an int where a float was: another specialisation
    op(x[:2])  # another shape
    assert seen == [False, True, False, False, False]
    assert op.captures == 1 and op.eager_calls == 4


def test_calls_aka_cannot_key_or_capture_stay_eager():
    fn, seen = _recording()
    op = _op(fn, _API)
    for _ in range(3):
        op(torch.ones(2), tag=object())  # an argument of no keyed type
    assert seen == [False] * 3 and op.captures == 0
    cpu = GraphedOp(fn)  # the real device test: CPU tensors are never graphed
    for _ in range(3):
        cpu(torch.ones(2))
    assert cpu.eager_calls == 3 and cpu.captures == 0


def test_a_failed_capture_runs_eagerly_from_then_on():
    fn, seen = _recording()
    op = _op(fn, _API)
    x = torch.ones(3)
    op(x)
    _API.fail = True
    out = op(x)  # the capture raises: the call is answered eagerly
    assert out.tolist() == [1.0] * 3 and op.captures == 0
    _API.fail = False
    op(x), op(x)
    assert seen == [False, True, False, False, False] and op.captures == 0 and _Graph.replays == 0


def test_inside_the_callers_capture_fn_runs_as_it_is():
    fn, seen = _recording()
    op = _op(fn, _API)
    x = torch.ones(2)
    _API.capturing = True
    op(x), op(x), op(x)
    assert seen == [True, True, True] and op.captures == 0 and _Graph.replays == 0


def test_least_recently_used_graph_is_dropped():
    fn, seen = _recording()
    op = _op(fn, _API, max_graphs=2)
    a, b, c = torch.ones(1), torch.ones(1), torch.ones(1)
    for t in (a, a, b, b, a, c, c):  # a, b captured; a used again; c's capture drops b
        op(t)
    assert op.captures == 3
    op(a)
    assert len(seen) == 6, "a is still kept"
    op(b)
    assert len(seen) == 7 and not seen[-1], "b was dropped: eager again"
    with pytest.raises(ValueError, match="at least one"):
        GraphedOp(fn, max_graphs=0)


def test_a_bound_call_replays_without_keying_and_shares_the_ops_graph(monkeypatch):
    import aka.graphed

    fn, seen = _recording()
    op = _op(fn, _API)
    x = torch.ones(4)
    step = op.bind(x, scale=2.0)
    first, second = step(), step()
    assert seen == [False, True] and op.captures == 1 and first.tolist() == [2.0] * 4
    keyed = []
    monkeypatch.setattr(aka.graphed, "call_key", lambda *a: keyed.append(a))
    third = step()
    assert third is second and seen == [False, True] and _Graph.replays == 2 and not keyed, "no key, no fn"
    monkeypatch.undo()
    assert op(x, scale=2.0) is second and op.captures == 1, "the keyed call finds the bound call's graph"
    assert op.bind(x, scale=3.0)() is not second and op.captures == 1, "other arguments: another key, eager"


def test_a_bound_call_does_not_replay_a_graph_the_op_dropped():
    fn, seen = _recording()
    op = _op(fn, _API, max_graphs=1)
    a, b = torch.ones(1), torch.ones(1)
    step = op.bind(a)
    step(), step()  # a captured
    op(b), op(b)  # b captured: a's graph dropped
    assert op.captures == 2
    step()
    assert seen[-1] is False and len(seen) == 5, "a is eager again, from the op's key table"
    step()
    assert op.captures == 3 and seen[-1] is True, "and captured again"


def test_a_bound_call_inside_the_callers_capture_runs_fn():
    fn, seen = _recording()
    op = _op(fn, _API)
    step = op.bind(torch.ones(2))
    step(), step()
    _API.capturing = True
    step()
    assert seen == [False, True, True] and _Graph.replays == 1


def test_call_key_is_pure_and_typed():
    x = torch.zeros(2, 3)
    on = lambda t: True  # noqa: E731
    assert call_key((x,), {"s": 1.0}, on) == call_key((x,), {"s": 1.0}, on)
    assert call_key((x,), {"s": 1.0}, on) != call_key((x,), {"s": True}, on)
    assert call_key((x,), {}, on) != call_key((x.t(),), {}, on), "strides are part of the key"
    assert call_key((x,), {"s": None}, on) is not None
    assert call_key((x,), {"s": (1, 2)}, on) is None
    assert call_key((x,), {}) is None, "a CPU tensor is not graphed"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_graph_reads_new_values_from_the_same_buffers():
    x = torch.arange(1024, device="cuda", dtype=torch.float32)
    op = GraphedOp(lambda x, s: (x * s + 1, x.sum()))
    want = lambda: (x * 3.0 + 1, x.sum())  # noqa: E731
    for _ in range(3):
        got = op(x, 3.0)
        for a, b in zip(got, want()):
            torch.testing.assert_close(a, b)
        x.mul_(-0.5)  # new values, same buffer: the next replay reads them
    assert op.captures == 1 and op.replays == 1 and op.eager_calls == 1
    step = op.bind(x, 3.0)  # the same key: the bound call replays the op's graph from its first call
    for _ in range(2):
        got = step()
        for a, b in zip(got, want()):
            torch.testing.assert_close(a, b)
        x.mul_(-0.5)
    assert op.captures == 1 and op.replays == 3 and op.eager_calls == 1
    g = torch.cuda.CUDAGraph()  # inside a caller's capture the op launches as it is
    with torch.cuda.graph(g):
        out = op(x, 3.0)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out[0], x * 3.0 + 1)
    assert op.eager_calls == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["gdn_prefill", "fa4_prefill", "fa4_decode"])
def test_each_ops_kernel_replayed_on_new_values_matches_the_reference(name):
    """The shipped kernel of each op through aka.graphed: new input values written into the same buffers
    before every call, each call's output checked against the float64 reference of those values."""
    from aka.contract.ops import get_op, load_module

    op = get_op(name)
    fn = getattr(load_module(op.promoted_kernel() or op.path("baseline")), op.spec.entry)
    graphed = GraphedOp(fn)
    case = op.cases("smoke")[0]
    x = op.inputs.make_inputs(case, 0, "cuda")
    for seed in (1, 2, 3, 4):
        fresh = op.inputs.make_inputs(case, seed, "cuda")
        for key, t in x.items():
            if isinstance(t, torch.Tensor):
                t.copy_(fresh[key])
        out = graphed(**x)
        got = out if isinstance(out, (tuple, list)) else (out,)
        want = op.reference.reference(**x)
        want = want if isinstance(want, (tuple, list)) else (want,)
        for a, b in zip(got, want):
            err = ((a.double() - b.double()).norm() / b.double().norm()).item()
            assert err < 1e-2, f"{name} seed {seed}: rel L2 {err:.2e}"
    assert graphed.captures == 1 and graphed.replays == 2 and graphed.eager_calls == 1


def test_keys_of_buffers_seen_once_are_forgotten_past_a_bound(monkeypatch):
    """A caller with new buffers every call never captures; what the op remembers of them stays bounded."""
    import aka.graphed

    monkeypatch.setattr(aka.graphed, "_MAX_KEYS", 4)
    fn, seen = _recording()
    op = _op(fn, _API)
    buffers = [torch.ones(2) for _ in range(20)]  # all alive: 20 addresses
    for t in buffers:
        op(t)
    assert op.eager_calls == 20 and op.captures == 0 and len(op._keys) <= 4
