"""A child process that must not outlive its parent: the worker (of the runner) and the candidate's
host (of the checker).

Two guards, because each alone has a gap: PR_SET_PDEATHSIG (Linux) kills the child the moment the
parent dies, even by kill -9, but fires when the parent *thread* that forked it ends; a watch thread
polling getppid() works everywhere and survives the forking thread, within ``period`` seconds. The
watch ends the child's whole process group (the worker is a session leader: what it started goes too).
"""

from __future__ import annotations

import os
import signal
import threading
import time


def arm_death_signal(parent: int) -> None:
    """PR_SET_PDEATHSIG on Linux; exits at once if the parent is already gone."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the watch (or the parent's own cleanup) covers it
        pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(3)


def watch_parent(parent: int, period: float = 0.5, group: bool = True) -> threading.Thread:
    """A daemon thread that ends this process (and, with ``group``, its process group) once the
    parent is gone (this process reparented), whatever the platform."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period)
        if group:
            try:
                os.killpg(os.getpgrp(), signal.SIGKILL)
            except OSError:
                pass
        os._exit(3)

    t = threading.Thread(target=watch, name="aka-parent-watch", daemon=True)
    t.start()
    return t
