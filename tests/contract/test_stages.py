"""A baseline written as stage files (modules.stages) is one module for every reader: rendered in order,
imports merged, sibling imports dropped, rendered again when a stage changes, a missing stage named."""

import os
import shutil
import subprocess
import sys

import pytest

from aka.contract.ops import get_op, load_module, project_root
from aka.contract.stages import render_stages
from aka.errors import ContractError

ROOT = project_root()

ENTRY = '''"""The op: entry point first."""

from __future__ import annotations

import math

from .core import SCALE, _twice

CONFIG = {"n": 2}


def run(x):
    return _twice(x) * SCALE * CONFIG["n"] + math.floor(0.5)
'''
CORE = '''"""Helpers the entry reads."""

from __future__ import annotations

import math  # noqa: F401  (the entry imports it too: merged once)

SCALE = 3


def _twice(x):
    return 2 * x
'''


def test_render_is_one_module_in_stage_order(tmp_path):
    (tmp_path / "entry.py").write_text(ENTRY)
    (tmp_path / "core.py").write_text(CORE)
    src = render_stages([tmp_path / "entry.py", tmp_path / "core.py"], tmp_path)
    assert src.index('"""The op: entry point first."""') < src.index("from __future__") < src.index("CONFIG =")
    assert src.count("import math") == 1 and "from .core" not in src
    assert src.index("def run") < src.index("# core.py\n# Helpers the entry reads.") < src.index("def _twice")
    assert "Edit those files, not this one" in src.splitlines()[2]
    out = tmp_path / "rendered.py"
    out.write_text(src)
    assert load_module(out).run(5) == 60


def test_the_gdn_baseline_is_rendered_from_its_stages_and_follows_them(tmp_path):
    shutil.copytree(ROOT / "workloads", tmp_path / "workloads")
    shutil.copytree(ROOT / "kernels" / "gdn_prefill", tmp_path / "kernels" / "gdn_prefill",
                    ignore=shutil.ignore_patterns("baseline.py", "__pycache__"))
    op = get_op("gdn_prefill", tmp_path)  # renders on load: a plain reader of the file finds it
    base = tmp_path / "kernels" / "gdn_prefill" / "baseline.py"
    assert base.is_file() and base.read_text().count("\nCONFIG = {") == 1
    for stage in ("entry", "common", "prep", "cp", "fwd", "fwd_ws"):
        assert f"\n# {stage}.py\n" in base.read_text()
    fwd = tmp_path / "kernels" / "gdn_prefill" / "stages" / "fwd.py"
    fwd.write_text(fwd.read_text() + "\n\nEDITED = True\n")
    assert "EDITED = True" in op.path("baseline").read_text()  # the next reader sees the edit
    # the rendered module imports on its own (no sibling import left), as the gate's process loads it
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from aka.contract.ops import load_module; " \
           f"m = load_module(__import__('pathlib').Path({str(base)!r})); print(sorted(m.CONFIG)[0], m.EDITED)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["BVA", "True"], out.stderr[-2000:]


def test_a_missing_stage_file_is_one_line_naming_it(tmp_path):
    shutil.copytree(ROOT / "workloads", tmp_path / "workloads")
    shutil.copytree(ROOT / "kernels" / "gdn_prefill", tmp_path / "kernels" / "gdn_prefill",
                    ignore=shutil.ignore_patterns("baseline.py", "__pycache__"))
    (tmp_path / "kernels" / "gdn_prefill" / "stages" / "cp.py").unlink()
    with pytest.raises(ContractError, match=r"stages/cp\.py: stage file named by the contract cannot be read"):
        get_op("gdn_prefill", tmp_path)


def test_the_baseline_is_rendered_again_only_when_a_stage_or_the_file_changed(tmp_path, monkeypatch):
    import aka.contract.ops as ops

    shutil.copytree(ROOT / "workloads", tmp_path / "workloads")
    shutil.copytree(ROOT / "kernels" / "gdn_prefill", tmp_path / "kernels" / "gdn_prefill",
                    ignore=shutil.ignore_patterns("baseline.py", "__pycache__"))
    op = get_op("gdn_prefill", tmp_path)
    calls = []
    real = ops.render_stages
    monkeypatch.setattr(ops, "render_stages", lambda *a: calls.append(1) or real(*a))
    base = op.path("baseline")
    for _ in range(3):
        assert op.path("baseline") == base
    assert calls == []  # nothing changed since get_op rendered it
    base.write_text("# edited by hand\n")
    assert "CONFIG = {" in op.path("baseline").read_text() and len(calls) == 1  # the hand edit is replaced
    prep = tmp_path / "kernels" / "gdn_prefill" / "stages" / "prep.py"
    prep.write_text(prep.read_text() + "\n\nPREP_EDITED = 1\n")
    assert "PREP_EDITED = 1" in op.path("baseline").read_text() and len(calls) == 2
    op.path("baseline")
    assert len(calls) == 2


@pytest.mark.parametrize("interpret", ["0", "1"])
def test_the_fa4_prefill_baseline_is_rendered_from_its_stages_and_imports_with_or_without_the_interpreter(
        tmp_path, interpret):
    """fa4_prefill's baseline is one module of two kernels (stages/entry.py picks one per call): rendered from
    its stages, it imports on its own in a fresh process, and it knows whether Triton's interpreter runs it
    (then the entry never picks the Gluon kernel)."""
    shutil.copytree(ROOT / "workloads", tmp_path / "workloads")
    shutil.copytree(ROOT / "kernels" / "fa4_prefill", tmp_path / "kernels" / "fa4_prefill",
                    ignore=shutil.ignore_patterns("baseline.py", "__pycache__", ".rendered"))
    assert not (tmp_path / "kernels" / "fa4_prefill" / "baseline.py").exists()
    base = get_op("fa4_prefill", tmp_path).path("baseline")
    src = base.read_text()
    assert src.count("\nCONFIG = {") == 1 and src.count("\ndef fa4_prefill(") == 1
    assert "from ." not in src and "import triton.experimental" not in src.split("\n# entry.py\n")[1]
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from aka.contract.ops import load_module; "
            f"m = load_module(__import__('pathlib').Path({str(base)!r})); "
            "print(m._INTERPRETED, type(m._fa4_prefill_kernel).__name__, type(m._fa4_prefill_gluon_kernel).__name__)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**env, "TRITON_INTERPRET": interpret})
    assert out.returncode == 0, out.stderr[-2000:]
    interpreted, triton_kind, gluon_kind = out.stdout.split()
    assert interpreted == str(interpret == "1")
    assert triton_kind == ("InterpretedFunction" if interpret == "1" else "JITFunction")
    assert gluon_kind == "GluonJITFunction"
