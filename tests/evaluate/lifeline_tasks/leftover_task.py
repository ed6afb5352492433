"""A worker task for tests/evaluate/test_leftovers.py: makes an exchange folder as a checker does,
records its pid and the folder, then waits (to be killed)."""

import json
import os
import time
from pathlib import Path

from aka.evaluate import exchange


def exchange_and_sleep(payload):
    folder = exchange.make_dir()
    (folder / "in_x.bin").write_bytes(b"\0" * 4096)
    Path(payload["pidfile"]).write_text(json.dumps({"pid": os.getpid(), "folder": str(folder)}))
    time.sleep(payload.get("seconds", 60))
    return {}
