"""Environment report for `aka doctor`. Reads state; never prints a key's value."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field

API_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")

# Proves the CPU interpreter really runs a bf16 kernel, in a fresh process so that
# TRITON_INTERPRET is set before triton decorates anything.
_INTERP_PROBE = (
    "import os; os.environ['TRITON_INTERPRET']='1'\n"
    "from aka.evaluate.host.interp import bf16_dot_shim_works\n"
    "ok, err = bf16_dot_shim_works(); print('ok' if ok else 'bad', err)\n"
)


@dataclass
class Report:
    rows: list[tuple[str, str, bool]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(ok for _, _, ok in self.rows)

    def add(self, key: str, value: str, ok: bool = True) -> None:
        self.rows.append((key, value, ok))


def _version(mod: str) -> tuple[str, bool]:
    try:
        m = __import__(mod)
        return getattr(m, "__version__", "?"), True
    except Exception as exc:  # report, don't crash: doctor exists to diagnose broken installs
        return f"not importable: {exc}", False


def interpreter_probe(timeout: float = 120.0) -> tuple[bool, str]:
    env = {k: v for k, v in os.environ.items() if k not in API_KEYS}
    try:
        proc = subprocess.run([sys.executable, "-c", _INTERP_PROBE], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, f"interpreter probe timed out after {timeout:.0f} s"
    out = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not out or not out[-1].startswith("ok"):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"interpreter probe failed: {tail}"
    return True, f"runs a bf16 tl.dot kernel (max error {float(out[-1].split()[1]):.1e})"


def collect() -> Report:
    r = Report()
    r.add("python", f"{platform.python_version()} ({sys.executable})")
    for mod in ("torch", "triton", "pydantic", "typer"):
        ver, ok = _version(mod)
        r.add(mod, ver, ok)
    try:
        import torch

        from aka.hardware import arch_of, detect_device

        d = detect_device()
        if d is not None:
            r.add("device", f"{d.name}, {arch_of(d.capability)}, {d.sm_count} SMs, "
                            f"{(d.total_memory_bytes or 0) / 2**30:.0f} GiB, CUDA {torch.version.cuda}")
        else:
            ok, detail = interpreter_probe()
            r.add("device", f"CPU only: Triton interpreter — {detail}", ok)
    except Exception as exc:
        r.add("device", f"cannot query: {exc}", False)
    _keys(r)
    return r


def _keys(r: Report) -> None:
    """Which keys the backends would find, read as they read them: the variable, then the config file."""
    from aka.config import KEY_VARS, ConfigError, config_path, key_source, load_config

    try:
        cfg = load_config()
    except ConfigError as exc:
        r.add("config", str(exc), False)
        cfg = None
    for provider, var in KEY_VARS.items():
        src = key_source(provider, cfg) if cfg is not None else (var if os.environ.get(var) else None)
        where = {None: f"not set ({var} or api_key under [{provider}] in {config_path()})",
                 var: f"set ({var})", "config": f"set (api_key under [{provider}] in {config_path()})"}[src]
        r.add(f"{provider} key", where)
