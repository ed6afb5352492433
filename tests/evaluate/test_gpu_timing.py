"""GPU checks of the timing core (run on the device by scripts/device/gpu_bench_checks.sh)."""

from __future__ import annotations

import pytest
import torch

from aka.contract.ops import get_op
from aka.evaluate.checker.verify import bench_worker
from aka.evaluate.host.bench import BenchConfig, CudaTimer, l2_bytes, time_fn
from aka.evaluate.parent.impls import resolve
from aka.evaluate.wire import BenchPayload

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CFG = BenchConfig(warmup=3, min_iters=20, max_iters=100, input_copies=1, graph=False)


def _stream_only_us(call, iters=20) -> float:
    """What a harness that records events on the current stream only would report (the cheat's view)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
        torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


def test_side_stream_work_is_timed():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def on_default():
        return a @ b

    def on_side():  # launches on a side stream and returns without joining it
        with torch.cuda.stream(side):
            return a @ b

    timer = CudaTimer(int(2 * l2_bytes()))
    t_default = time_fn([on_default], CFG, timer).median_us
    t_side = time_fn([on_side], CFG, timer).median_us
    assert t_default > 500  # ~1.4 ms at 790 TFLOP/s: a real amount of work
    assert t_side == pytest.approx(t_default, rel=0.10)
    # the check has teeth: stream-only events would have missed the side-stream matmul
    assert _stream_only_us(on_side) < 0.5 * t_default


def test_same_kernel_twice_in_one_run_agrees_within_2_percent():
    op = get_op("gdn_prefill")
    refs, _ = resolve(op, ["baseline", "baseline"])
    res = bench_worker(BenchPayload(op="gdn_prefill", impls=refs, shapes="G1,G2,G5,G10",
                                    config={"graph": False})).model_dump()
    for row in res["rows"]:
        m1 = row["results"]["baseline"]["eager"]["median_us"]
        m2 = row["results"]["baseline#2"]["eager"]["median_us"]
        if min(m1, m2) > 50:
            assert abs(m1 - m2) / min(m1, m2) < 0.02, f"{row['shape']}: {m1:.1f} vs {m2:.1f} µs"


def test_an_op_ranked_on_graphs_is_screened_and_compared_on_replays():
    """fa4_decode ranks on CUDA-graph replay (its contract's rank_timing): the screen's ranked times and
    the ABBA are replays, their outputs checked, and the baseline against itself is even."""
    from aka.evaluate.parent.evaluator import RealEvaluator
    from aka.settings import OptimizeSettings

    op = get_op("fa4_decode")
    ev = RealEvaluator(op, OptimizeSettings(op=op.name, interpreter=False))
    assert ev.rank == "graph"
    b = ev.bench(op.path("baseline"), "D1-q1,D7-q1")
    assert not b.error and set(b.times_us) == {"D1-q1", "D7-q1"}, b.error
    cmp = ev.compare(op.path("baseline"), op.path("baseline"), "D1-q1,D7-q1")
    assert not cmp.error and cmp.timing == "gpu", cmp.error
    assert 0.95 < cmp.geomean < 1.05, cmp.geomean


def test_a_replay_is_timed_without_the_hosts_submission_and_with_all_its_work():
    from aka.evaluate.host.bench import GraphTimer

    timer = GraphTimer(int(2 * l2_bytes()))
    x = torch.zeros(1024, device="cuda")
    tiny = timer.capture([lambda: x.add_(1)])[0]
    t_tiny = sorted(timer.measure(tiny) for _ in range(30))[15]
    # one 4 KB elementwise kernel: a few µs of GPU time. The host's graph launch (10-40 µs on the
    # H200's host) and its wake-up after a sync stay out of the interval.
    assert t_tiny < 10, t_tiny
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def forked():  # half the work on a joined side stream: captured, so replayed, and inside the interval
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            c = a @ b
        torch.cuda.current_stream().wait_stream(side)
        return c, a @ b

    forked()  # cuBLAS makes its handle for the side stream outside the capture
    torch.cuda.synchronize()
    big = timer.capture([forked])[0]
    t_big = sorted(timer.measure(big) for _ in range(10))[5]
    t_one = time_fn([lambda: a @ b], CFG, CudaTimer(int(2 * l2_bytes()))).median_us
    assert t_big > 1.7 * t_one, (t_big, t_one)  # both matmuls timed


def test_the_interval_on_the_callers_stream_leaves_out_the_timers_own_sync():
    """An eager sample holds the device-wide sync's round trip after the call; the interval the host's cost
    is read from closes on the caller's stream before it, and still holds the call's GPU work."""
    from aka.evaluate.host.bench import GraphTimer

    x = torch.zeros(1024, device="cuda")
    eager = time_fn([lambda: x.add_(1)], CFG, CudaTimer(int(2 * l2_bytes())))
    assert eager.stream_us is not None and eager.stream_us < eager.median_us, eager
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    big = time_fn([lambda: a @ a], CFG, CudaTimer(int(2 * l2_bytes())))
    timer = GraphTimer(int(2 * l2_bytes()))
    replay = timer.capture([lambda: a @ a])[0]
    graph = sorted(timer.measure(replay) for _ in range(20))[10]
    assert big.stream_us > 0.95 * graph, (big.stream_us, graph)  # the matmul is inside it


def test_the_bench_compiles_every_kernel_specialisation_before_the_first_timing():
    """`aka bench`'s head start (aka.evaluate.host.harness.precompile_kernels): each kernel implementation's
    specialisations over the shapes are recorded and compiled by forked children, none fails, and the shapes are
    timed and checked after it as before."""
    op = get_op("gdn_prefill")
    refs, _ = resolve(op, ["baseline", "baseline@graph"])
    res = bench_worker(BenchPayload(op="gdn_prefill", impls=refs, shapes="G5,G7", precompile=4,
                                    config={"graph": False, "min_iters": 5, "max_iters": 10})).model_dump()
    lines = [n for n in res["notes"] if n.startswith("precompile")]
    assert len(lines) == 1 and "precompile baseline: " in lines[0] and "failed" not in lines[0], res["notes"]
    done, _, total = lines[0].split(": ")[1].split(" specialisations")[0].partition(" of ")
    assert int(done) == int(total) > 0, lines[0]
    for row in res["rows"]:
        for cell in row["results"].values():
            assert cell["error"] is None and cell["eager"]["median_us"] > 0, row
