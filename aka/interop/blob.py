"""The safetensors file format, for the few small tensors a workload needs by value (cu_seqlens,
page tables): an 8-byte little-endian header length, a JSON header, then the raw bytes. Written here
rather than through the `safetensors` package, which aka does not otherwise need."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

_CODES = {torch.int32: "I32", torch.int64: "I64", torch.int16: "I16", torch.int8: "I8", torch.bool: "BOOL",
          torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16"}
_DTYPES = {v: k for k, v in _CODES.items()}


def save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    header: dict[str, object] = {}
    chunks, offset = [], 0
    for name, t in tensors.items():
        data = t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(chunks))


def load(path: Path) -> dict[str, torch.Tensor]:
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        buf = bytearray(blob[8 + n + a:8 + n + b])
        t = torch.frombuffer(buf, dtype=torch.uint8) if buf else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(_DTYPES[h["dtype"]]).reshape(h["shape"])
    return out
