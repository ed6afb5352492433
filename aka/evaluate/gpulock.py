"""One lock per machine between compile calls (shared) and timings (exclusive), used by the parent
(the ABBA comparison) and by the workers (compile calls, the screen's timing)."""

from __future__ import annotations

import fcntl
from contextlib import contextmanager


@contextmanager
def gpu_lock(path: str | None, exclusive: bool = False):
    """flock on `path`: shared for compile calls, exclusive for timing.

    Linux flock gives a waiting exclusive request no priority: with a dozen compile workers taking
    turns on the shared lock, a timing could wait for minutes. So everyone first passes a
    turnstile (`path`.turnstile): a reader only while it takes its shared lock, a writer for as
    long as it holds the lock, so readers that arrive after a writer queue behind it.
    """
    if not path:
        yield
        return
    with open(path + ".turnstile", "a") as gate, open(path, "a") as fh:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
