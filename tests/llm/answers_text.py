"""Model answers the fake servers play: plans and modules for the toy op scale_add."""

from __future__ import annotations

import json
from pathlib import Path

BASELINE = (Path(__file__).parent / "toyop" / "kernels" / "scale_add" / "baseline.py").read_text()

PLAN = {"hypothesis": "larger blocks halve the program count (S2: 8 -> 4 programs)",
        "structural_change": "", "expected_effect": {"batch 1, short": "-5%"},
        "risks": ["none for an elementwise op"], "param_ranges": {"BLOCK": [128, 256, 512]},
        "avoided": ["vectorised loads: no gain in the interpreter"], "cited_wiki": [], "cited_evidence": []}
GOOD_PLAN = "Here is my plan.\n```json\n" + json.dumps(PLAN, indent=1) + "\n```\n"
BAD_PLAN = '```json\n{"hypothesis": "bigger", "risk": "typo in the field name"}\n```'  # 'risk' is not a field
NOT_JSON = "I think we should use larger blocks."

GOOD_CODE = BASELINE.replace('CONFIG = {"BLOCK": 128}', 'CONFIG = {"BLOCK": 256}')
# Passes the static check, fails when the kernel is compiled (traced) on its first call.
COMPILE_ERROR_CODE = GOOD_CODE.replace("tl.store(o_ptr + offs, 2 * x + y, mask=mask)",
                                       "tl.store(o_ptr + offs, tl.fused_twice_plus(x, y), mask=mask)")
OTHER_OP_CODE = "import torch\n\n\ndef fa4_decode(q, k_cache, v_cache):\n    return q\n"


def fenced(code: str) -> str:
    return f"Here is the module.\n```python\n{code}```\n"


PROSE = "Larger blocks would help; I would change BLOCK to 256 and keep the rest."
