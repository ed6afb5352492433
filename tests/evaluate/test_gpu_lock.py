"""The GPU lock between compile calls (shared) and timings (exclusive): a waiting timing is not starved."""

import threading
import time

from aka.evaluate.gpulock import gpu_lock


def test_a_waiting_exclusive_holder_goes_before_later_shared_ones(tmp_path):
    path = str(tmp_path / "gpu.lock")
    got: dict[str, float] = {}
    t0 = time.monotonic()

    def hold(name, exclusive, start, seconds):
        time.sleep(start)
        with gpu_lock(path, exclusive=exclusive):
            got[name] = time.monotonic() - t0
            time.sleep(seconds)

    threads = [threading.Thread(target=hold, args=a) for a in
               [("reader1", False, 0.0, 0.6), ("writer", True, 0.15, 0.3), ("reader2", False, 0.3, 0.05)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert got["reader1"] < got["writer"] < got["reader2"]  # without the turnstile reader2 enters at 0.3 s
    assert got["writer"] >= 0.55 and got["reader2"] >= got["writer"] + 0.25


def test_shared_holders_overlap(tmp_path):
    path = str(tmp_path / "gpu.lock")
    inside, peak = [0], [0]
    lock = threading.Lock()

    def hold():
        with gpu_lock(path):
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.2)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert peak[0] == 3
