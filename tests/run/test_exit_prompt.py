"""A run that stops (time limit, budget) while the next candidate still compiles must exit at once.

Seen on the H200 (2026-12-01): `aka optimize` printed its summary at 438 s and then sat in Python's
exit handler joining the compile pool's worker threads of the prefetched candidate until the
device script's hard cap killed it. The compile workers must not keep the process alive.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent("""
    import sys, threading, time
    import aka.evaluate.parent.door
    import aka.evaluate.parent.evaluator as ev
    from aka.contract.ops import get_op
    from aka.settings import OptimizeSettings

    started = threading.Event()

    def slow(*_a, **_k):  # a compile worker that would run for a minute
        started.set()
        time.sleep(60)
        return True, {}, ""

    aka.evaluate.parent.door.call = slow  # the evaluator looks the door's call up when it calls
    op = get_op("gdn_prefill")
    door = ev.RealEvaluator(op, OptimizeSettings(op=op.name, interpreter=True))
    # the prefetch job's thread is a daemon, as aka.run.prefetch.Job makes it; compile() runs inside it
    t = threading.Thread(target=door.compile, args=(op.path("baseline"),), daemon=True)
    t.start()
    if not started.wait(20):
        sys.exit("the compile worker never started")
    print("main done", flush=True)
""")


def test_process_exits_while_a_prefetched_compile_still_runs(tmp_path):
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=50)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-800:]
    assert "main done" in p.stdout
    assert took < 20, f"exit waited {took:.0f} s for a compile worker"


def testmap_workers_returns_results_in_order():
    from aka.evaluate.parent.evaluator import map_workers

    assert map_workers(lambda x: x * x, [3, 1, 2]) == [9, 1, 4]


def testmap_workers_reraises_a_worker_exception():
    import pytest

    from aka.evaluate.parent.evaluator import map_workers

    def boom(x):
        if x == 2:
            raise ValueError("worker 2 broke")
        return x

    with pytest.raises(ValueError, match="worker 2 broke"):
        map_workers(boom, [1, 2, 3])
