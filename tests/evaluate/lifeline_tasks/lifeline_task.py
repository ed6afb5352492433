"""A worker task for tests/evaluate/test_lifeline.py: records its pid, then waits."""

import os
import time
from pathlib import Path


def sleep(payload):
    Path(payload["pidfile"]).write_text(str(os.getpid()))
    time.sleep(payload.get("seconds", 60))
    return {}
