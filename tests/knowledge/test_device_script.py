"""scripts/device/device_hw_check.py on CPU, with the device faked: both the aka path and the fallback."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

import aka.hardware
from aka.contract.ops import project_root
from aka.hardware import Detected


@pytest.fixture
def script():
    path = project_root() / "scripts" / "device" / "device_hw_check.py"
    spec = importlib.util.spec_from_file_location("device_hw_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


H200 = dict(name="NVIDIA H200", capability="9.0", sm_count=132, l2_bytes=62914560, smem_per_sm_bytes=233472,
            smem_per_block_optin_bytes=232448, regs_per_sm=65536)


@pytest.mark.parametrize("update, rc", [({}, 0), ({"l2_bytes": 52428800}, 1), ({"name": "NVIDIA H200 NVL"}, 1)],
                         ids=["match", "l2-mismatch", "unknown-name"])
def test_aka_path(script, monkeypatch, capsys, update, rc):
    monkeypatch.setattr(aka.hardware, "detect_device", lambda index=0: Detected(**{**H200, **update}))
    assert script.main() == rc
    out = capsys.readouterr().out
    assert "path:   aka.hardware" in out
    assert ("RESULT: OK" in out) == (rc == 0)


def _fake_torch(name: str, l2: int):
    props = types.SimpleNamespace(name=name, major=9, minor=0, total_memory=150 * 2**30, multi_processor_count=132,
                                  L2_cache_size=l2, shared_memory_per_multiprocessor=233472,
                                  shared_memory_per_block_optin=232448, regs_per_multiprocessor=65536)
    cuda = types.SimpleNamespace(is_available=lambda: True, get_device_properties=lambda i: props)
    return types.SimpleNamespace(cuda=cuda)


def test_fallback_path_agrees_with_aka(script, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch("NVIDIA H200", 62914560))
    det, page_id, facts, names, _ = script.without_aka()
    assert page_id == "h200" and facts["sm_count"] == det["sm_count"] == 132 and names == ["NVIDIA H200"]
    monkeypatch.setitem(sys.modules, "torch", _fake_torch("NVIDIA H200 NVL", 62914560))
    assert script.without_aka()[1] is None
