"""A local OpenAI-compatible (or Anthropic) server with a scripted 'model', for trying `aka optimize` by hand.

    python tests/support/demo_server.py openai 8765 &
    aka optimize gdn_prefill --backend openai --base-url http://127.0.0.1:8765/v1 --budget 3

Works for any op: plans name the first integer key of the incumbent's CONFIG; code is the incumbent
(taken from the codegen prompt) with that key changed. The script shows each path once: a malformed
plan then a valid one; code the static check refuses (import os) then its repair; then prose, an empty message and
code for another op, each of which fails its attempt with the reason.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fake_servers import FakeServer, user_text  # noqa: E402

_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _config_key(source: str) -> tuple[str, int] | None:
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CONFIG" for t in node.targets):
            for k, v in ast.literal_eval(node.value).items():
                if isinstance(v, int) and not isinstance(v, bool) and v > 1:
                    return k, v
    return None


class DemoModel:
    def __init__(self):
        self.codegens = 0

    def __call__(self, body):
        msgs = [m for m in body["messages"] if m["role"] != "system"]
        first = user_text(msgs[0])
        blocks = _BLOCK.findall(first)
        incumbent = blocks[-1] if blocks else ""
        kv = _config_key(incumbent) if incumbent else None
        if "Plan the next candidate" in first:
            if "(attempt 0 " in first and len(msgs) == 1:
                return '```json\n{"hypothesis": "", "expected": "faster"}\n```'  # does not validate
            key, val = kv or ("BLOCK", 64)
            plan = {"hypothesis": f"{key} {val} -> {val * 2}: fewer programs, more work each",
                    "param_ranges": {key: [val, val * 2]}, "risks": ["register pressure"],
                    "avoided": ["structural changes: this is a demo model"]}
            return "```json\n" + json.dumps(plan) + "\n```"
        if len(msgs) > 1:  # repair: the fixed module
            return "```python\n" + self.tweaked(incumbent, kv) + "```"
        self.codegens += 1
        if self.codegens == 1:
            return "```python\nimport os\n" + self.tweaked(incumbent, kv) + "```"  # refused by the static check
        return ["I would double the block size and keep everything else.", "",
                "```python\ndef some_other_op(x):\n    return x\n```"][(self.codegens - 2) % 3]

    @staticmethod
    def tweaked(source: str, kv) -> str:
        if kv is None:
            return source
        key, val = kv
        return re.sub(rf'("{key}":\s*){val}\b', rf"\g<1>{val * 2}", source, count=1)


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = FakeServer(kind, responder=DemoModel(), port=port)
    print(f"serving a scripted {kind} model at {server.url}", flush=True)
    while True:
        time.sleep(3600)
