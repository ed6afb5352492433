"""Calibration cache: keyed by device and driver, under the user's cache directory."""

from __future__ import annotations

import pytest
import torch

from aka.evaluate.checker import calibrate
from aka.evaluate.checker.calibrate import Ceilings


def test_cache_round_trip_is_keyed_by_device_and_driver(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    c = Ceilings(device="NVIDIA H200", driver="580.1", copy_tbps=4.3, gemm_tflops=790)
    calibrate.store(c)
    assert (tmp_path / "aka" / "calibration.json").is_file()
    assert calibrate.load_cached("NVIDIA H200", "580.1") == c
    assert calibrate.load_cached("NVIDIA H200", "590.0") is None  # a new driver re-measures
    assert calibrate.load_cached("NVIDIA H100", "580.1") is None


def test_floor_is_the_larger_of_compute_and_memory_time():
    c = Ceilings(device="d", driver="x", copy_tbps=4.0, gemm_tflops=800)
    assert c.floor_us(flops=800e9, nbytes=1e6) == pytest.approx(1000.0)  # compute-bound
    assert c.floor_us(flops=1.0, nbytes=4e9) == pytest.approx(1000.0)  # memory-bound


def test_no_calibration_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="no calibration on CPU"):
        calibrate.ceilings()


def test_ceilings_above_the_datasheet_are_implausible():
    """A cache written beside a tampered timer (H200, 2026-12-01: 21,475 TB/s) is measured again."""
    from aka.evaluate.checker.calibrate import Ceilings, implausible

    h200 = (989.5, 4800.0)
    real = Ceilings(device="NVIDIA H200", driver="580", copy_tbps=4.3, gemm_tflops=788)
    assert implausible(real, h200) == ""
    assert implausible(real, None) == ""
    bad = real.model_copy(update={"copy_tbps": 21474.8})
    assert "above twice the datasheet" in implausible(bad, h200)
    assert "above the datasheet's 990" in implausible(real.model_copy(update={"gemm_tflops": 1e7}), h200)
