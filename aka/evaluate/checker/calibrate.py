"""Measured device ceilings (copy bandwidth, bf16 GEMM rate), once per device and driver.

Datasheet rates are leads, not ceilings (METHOD.md): a large device-to-device copy (bytes read plus
bytes written) and a large bf16 matrix product give the two numbers the roofline fractions divide
by. They are cached as JSON under $XDG_CACHE_HOME/aka (or ~/.cache/aka), keyed by the device name
and the driver version, so a driver update re-measures. CPU runs have no calibration.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from aka.evaluate.host.bench import BenchConfig, CudaTimer, l2_bytes, time_fn
from aka.evaluate.wire import Ceilings


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aka"


def driver_version() -> str:
    """The NVIDIA driver version (nvidia-smi), else the CUDA runtime torch was built with."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        first = out.stdout.strip().splitlines()
        if first:
            return first[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    import torch

    return f"cuda-runtime-{torch.version.cuda}"


def _key(device: str, driver: str) -> str:
    return f"{device}|{driver}"


def load_cached(device: str, driver: str, path: Path | None = None) -> Ceilings | None:
    path = path or cache_dir() / "calibration.json"
    try:
        data = json.loads(path.read_text())
        return Ceilings.model_validate(data[_key(device, driver)])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(ceilings: Ceilings, path: Path | None = None) -> None:
    path = path or cache_dir() / "calibration.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[_key(ceilings.device, ceilings.driver)] = ceilings.model_dump()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True))


def measure() -> Ceilings:
    """Time a 1 GiB copy and an 8192^3 bf16 GEMM on the current device (a few seconds)."""
    import torch

    cfg = BenchConfig(warmup=3, min_iters=20, max_iters=100, input_copies=1, graph=False)
    timer = CudaTimer(int(2 * l2_bytes()))
    copy = _copy_timing(cfg, timer)
    n = 8192
    gemm = _gemm_timing(n, cfg, timer)
    name = torch.cuda.get_device_name(torch.cuda.current_device())
    return Ceilings(device=name, driver=driver_version(),
                    copy_tbps=2 * 2**30 / (copy.median_us * 1e-6) / 1e12,
                    gemm_tflops=2 * n**3 / (gemm.median_us * 1e-6) / 1e12)


def _copy_timing(cfg: BenchConfig, timer: CudaTimer):
    import torch

    src = torch.randn(2**28, device="cuda")  # 1 GiB fp32: random, never zeros (METHOD.md)
    dst = torch.empty_like(src)
    return time_fn([lambda: dst.copy_(src)], cfg, timer)


def _gemm_timing(n: int, cfg: BenchConfig, timer: CudaTimer):
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return time_fn([lambda: a @ b], cfg, timer)


def implausible(c: Ceilings, peaks: tuple[float, float] | None) -> str:
    """Why measured ceilings cannot be real ('' when they can): above the datasheet's peaks (bf16 dense
    TFLOP/s, HBM GB/s) by more than 10%. A cache written by a tampered timer is caught here. Pure."""
    if peaks is None:
        return ""
    if c.gemm_tflops > 1.1 * peaks[0]:
        return f"bf16 GEMM {c.gemm_tflops:.0f} TFLOP/s is above the datasheet's {peaks[0]:.0f}"
    if c.copy_tbps > 1.1 * 2 * peaks[1] / 1e3:  # a copy moves its bytes twice (read + write)
        return f"copy {c.copy_tbps:.1f} TB/s is above twice the datasheet's {peaks[1] / 1e3:.1f} TB/s"
    return ""


def ceilings(force: bool = False) -> Ceilings:
    """Cached ceilings for this device and driver, measuring them on a miss or when the cached ones are
    implausible (GPU only)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no calibration on CPU: roofline fractions need a GPU")
    name = torch.cuda.get_device_name(torch.cuda.current_device())
    driver = driver_version()
    cached = None if force else load_cached(name, driver)
    from aka.hardware import datasheet_peaks

    if cached is not None and not implausible(cached, datasheet_peaks()):
        return cached
    fresh = measure()
    store(fresh)
    return fresh
