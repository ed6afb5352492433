"""What the two GPU timers enqueue around a timed call, and in which order, on a recording fake of
torch.cuda (the device-side figures are checked by tests/evaluate/test_gpu_timing.py)."""

from __future__ import annotations

from types import SimpleNamespace

from aka.evaluate.host.bench import CudaTimer, GraphTimer


def _timer(cls, log: list[str]):
    class Event:
        def __init__(self, name):
            self.name = name

        def record(self):
            log.append(f"{self.name}.record")

        def synchronize(self):
            log.append(f"{self.name}.synchronize")

        def elapsed_time(self, other):
            return 0.5

    cuda = SimpleNamespace(synchronize=lambda: log.append("device sync"),
                           _sleep=lambda cycles: log.append(f"spin {cycles}"))
    timer = cls.__new__(cls)  # no CUDA here: the fields __init__ would allocate, faked
    timer._torch = SimpleNamespace(cuda=cuda)
    timer._flush = SimpleNamespace(fill_=lambda v: log.append("flush"))
    timer._start, timer._after, timer._end = Event("start"), Event("after"), Event("end")
    if cls is GraphTimer:
        timer._spin = cuda._sleep
    return timer


def test_an_eager_interval_closes_after_a_device_wide_sync():
    # a call may leave work on a side stream: only a device-wide sync before the end event holds it. The
    # event recorded on the caller's stream before that sync closes the interval the host's cost is read
    # from: the sync's round trip is the timer's own
    log: list[str] = []
    timer = _timer(CudaTimer, log)
    us = timer.measure(lambda: log.append("call"))
    assert log == ["flush", "device sync", "start.record", "call", "after.record", "device sync", "end.record",
                   "end.synchronize"]
    assert us == 500.0 and timer.stream_us == 500.0


def test_a_replay_interval_holds_the_gpu_work_and_not_the_hosts_submission():
    log: list[str] = []
    us = _timer(GraphTimer, log).measure(lambda: log.append("replay"))
    # the GPU spins while the host submits the start event and the replay; the end event follows the
    # replay on its stream, with no host round trip between them
    assert log == ["flush", "device sync", f"spin {GraphTimer.SPIN_CYCLES}", "start.record", "replay",
                   "end.record", "end.synchronize"]
    assert us == 500.0


def test_without_torchs_spin_helper_a_replay_is_still_timed():
    log: list[str] = []
    timer = _timer(GraphTimer, log)
    timer._spin = None
    timer.measure(lambda: log.append("replay"))
    assert log == ["flush", "device sync", "start.record", "replay", "end.record", "end.synchronize"]


def test_an_eager_call_reports_the_hosts_time_inside_the_call_and_a_replay_none():
    import time

    from aka.evaluate.host.bench import BenchConfig, time_interleaved

    log: list[str] = []
    eager, graph = _timer(CudaTimer, log), _timer(GraphTimer, log)
    eager.measure(lambda: time.sleep(0.004))  # a call whose host work takes 4 ms
    assert 4_000 <= eager.in_call_us < 40_000
    eager.measure(lambda: None)
    assert eager.in_call_us < 4_000
    cfg = BenchConfig(warmup=1, warmup_ms=0.0, min_iters=3, max_iters=3, time_cap_s=30.0)
    t = time_interleaved({"e": [lambda: time.sleep(0.002)], "g": [lambda: None]}, cfg, {"e": eager, "g": graph})
    assert t["e"].n == 3 and 2_000 <= t["e"].in_call_us < 20_000  # the median of its calls
    assert t["g"].in_call_us is None
    assert t["e"].stream_us == 500.0 and t["g"].stream_us is None
