"""Tensors across the process boundary between the checker and the candidate's process, as raw bytes
in files of a private folder (on /dev/shm where it has room, so the bytes never touch a disk).

Only bytes cross: a tensor is written as its contiguous little-endian bytes beside a small JSON
description (dtype, shape). The reader never unpickles anything the other side wrote; it checks
that the file holds exactly the bytes the description promises, and the checker compares the
description with what it expected before it reads. Both sides map the file with ``torch.from_file``
and copy out of it, so later writes to the file cannot reach a tensor already read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

DTYPES = ("bfloat16", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")


class TensorRef(BaseModel):
    """Where one tensor's bytes are, and what they are."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    file: str = Field(description="file name inside the exchange folder (no path separators)")
    dtype: str = Field(description="torch dtype name, e.g. bfloat16")
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class ExchangeError(Exception):
    """A description that does not match its file, or a dtype/shape that is not allowed."""


def make_dir(need_bytes: int = 0) -> Path:
    """A private folder for one session's tensors: /dev/shm when it has room, else the temp folder.
    Named aka-exchange-<pid>-*, this process's pid: when a worker is killed before it could remove
    it, its runner removes it, or the next aka start does (aka.evaluate.parent.runner.remove_folders_of and
    sweep_stale_folders); on /dev/shm it holds RAM."""
    shm = Path("/dev/shm")
    base = None
    if shm.is_dir() and os.access(shm, os.W_OK):
        free = shutil.disk_usage(shm).free
        if free > max(need_bytes, 1 << 30):
            base = str(shm)
    return Path(tempfile.mkdtemp(prefix=f"aka-exchange-{os.getpid()}-", dir=base))


def _torch_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise ExchangeError(f"dtype '{name}' cannot cross the process boundary")
    return getattr(torch, name)


def dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _check_name(file: str) -> None:
    if not file or "/" in file or "\\" in file or file.startswith("."):
        raise ExchangeError(f"bad exchange file name {file!r}")


def put(t, folder: Path, file: str) -> TensorRef:
    """Write tensor ``t`` (any device) to ``folder/file``; returns its description."""
    import torch

    _check_name(file)
    name = dtype_name(t)
    _torch_dtype(name)
    flat = t.detach().contiguous().reshape(-1)
    if flat.is_cuda:
        flat = flat.cpu()
    raw = flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)
    with open(folder / file, "wb") as fh:
        fh.write(memoryview(raw.numpy()))
    return TensorRef(file=file, dtype=name, shape=tuple(t.shape))


def get(ref: TensorRef, folder: Path, device: str = "cpu"):
    """Read a tensor back: exactly ``numel * itemsize`` bytes, copied into memory this process owns."""
    import torch

    _check_name(ref.file)
    dt = _torch_dtype(ref.dtype)
    if any(d < 0 for d in ref.shape):
        raise ExchangeError(f"{ref.file}: negative dimension in {ref.shape}")
    path = folder / ref.file
    nbytes = ref.numel * torch.empty(0, dtype=dt).element_size()
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ExchangeError(f"{ref.file}: {exc.strerror}") from None
    if size != nbytes:
        raise ExchangeError(f"{ref.file}: holds {size} bytes, its description says {nbytes}")
    if nbytes == 0:
        return torch.empty(ref.shape, dtype=dt, device=device)
    raw = torch.from_file(str(path), shared=False, size=nbytes, dtype=torch.uint8)
    out = raw.view(dt).reshape(ref.shape).clone()  # own memory, not the file's pages
    return out.to(device) if device != "cpu" else out


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
