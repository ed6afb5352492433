"""External gdn_prefill implementations the harness times beside ours (trusted code, not a kernel).

fla: ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` (flash-linear-attention), its Triton path.
FLA_FLASH_QLA=0 is set before the import: fla otherwise dispatches to FlashQLA when that is
installed, and the row would silently be another library. The conversion to fla's layout (batch
axis of 1, int64 cu_seqlens) is done here, outside the timed callable.

flashqla: ``flash_qla.chunk_gated_delta_rule`` (QwenLM/FlashQLA, TileLang kernels for sm90/sm100):
the same layout as fla, grouped values (HV > HK) taken as they are, its automatic context
parallelism on. It needs tilelang, z3-solver, apache-tvm-ffi and torch-c-dlpack-ext; each new head
layout JIT-compiles for 10-40 s on its first call, which happens here, untimed.
"""

from __future__ import annotations

import os


def _fla_entry():
    os.environ.setdefault("FLA_FLASH_QLA", "0")
    if os.environ["FLA_FLASH_QLA"] != "0":
        raise RuntimeError(f"FLA_FLASH_QLA={os.environ['FLA_FLASH_QLA']}: set it to 0 to time fla's Triton path")
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except ImportError as exc:
        raise ImportError(f"fla not importable ({exc}); install flash-linear-attention to time it") from None
    return chunk_gated_delta_rule


def _dispatch_spy():
    """Count calls into fla's FlashQLA backend, when this fla has one; None otherwise."""
    try:
        from fla.ops.gated_delta_rule.backends.flash_qla import FlashQLABackend
    except ImportError:
        return None, None
    hits: list[int] = []
    original = getattr(FlashQLABackend, "chunk_gated_delta_rule", None)
    if original is None:
        return None, None

    def spy(self, *args, **kwargs):
        hits.append(1)
        return original(self, *args, **kwargs)

    FlashQLABackend.chunk_gated_delta_rule = spy
    return hits, lambda: setattr(FlashQLABackend, "chunk_gated_delta_rule", original)


# fla version -> whether its grouped-value call (HV > HK) agreed with the repeated-heads call. On a fresh
# H200 each head layout fla sees costs it an autotune (15-48 s per layout, 2026-11-29), so the check
# runs on the first grouped shape of a process only.
_GROUPED_OK: dict[str, bool] = {}


def _rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def fla(inputs: dict):
    """fla's chunk_gated_delta_rule on the contract's packed varlen inputs; returns the timed callable.

    Value heads that share a q/k head (HV > HK): fla versions differ on grouped values, so one
    untimed call with q/k as they are is checked against one with q/k repeated to HV heads (once per
    process); the repeated layout (the way HF's Qwen3-Next calls fla) is used unless the grouped call
    agrees.
    """
    run = _fla_entry()
    import torch

    q, k, v = (inputs[n].unsqueeze(0) for n in ("q", "k", "v"))
    g, beta = inputs["g"].unsqueeze(0), inputs["beta"].unsqueeze(0)
    cu = inputs["cu_seqlens"].to(torch.int64)
    h0 = inputs.get("initial_state")
    kw = dict(initial_state=h0, output_final_state=True, cu_seqlens=cu, scale=inputs.get("scale"))
    group = v.shape[2] // q.shape[2]
    layout = "q/k heads as given"
    if group > 1:
        qr, kr = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
        agree = _GROUPED_OK.get(_version())
        if agree is None:  # probed once per process: each new head layout costs fla a full autotune
            expanded = run(qr, kr, v, g, beta, **kw)
            try:
                grouped = run(q, k, v, g, beta, **kw)
                agree = grouped[0].shape == expanded[0].shape and _rel(grouped[0], expanded[0]) < 1e-2
            except Exception:  # this fla rejects grouped values
                agree = False
            _GROUPED_OK[_version()] = agree
        if not agree:
            q, k, layout = qr, kr, f"q/k repeated to {v.shape[2]} heads outside the timed call"
    hits, restore = _dispatch_spy()
    try:
        run(q, k, v, g, beta, **kw)
        path = "FlashQLA" if hits else ("Triton" if hits is not None else "Triton (no FlashQLA backend in this fla)")
    finally:
        if restore:
            restore()

    def call():
        return run(q, k, v, g, beta, **kw)

    call.note = f"fla {_version()} {path} path; {layout}; int64 cu_seqlens, [1, T, H, D] views"
    return call


def _flashqla_entry():
    try:
        from flash_qla import chunk_gated_delta_rule
    except ImportError as exc:
        raise ImportError(f"flash_qla not importable ({exc}); install FlashQLA with tilelang, z3-solver, "
                          "apache-tvm-ffi and torch-c-dlpack-ext to time it") from None
    except Exception as exc:  # tilelang refuses an unsupported GPU (or finds no libz3) at import
        raise RuntimeError(f"flash_qla failed to import: {type(exc).__name__}: {str(exc)[:200]}") from None
    return chunk_gated_delta_rule


def flashqla(inputs: dict):
    """FlashQLA's chunk_gated_delta_rule on the contract's packed varlen inputs; returns the timed callable."""
    run = _flashqla_entry()
    import torch

    q, k, v = (inputs[n].unsqueeze(0) for n in ("q", "k", "v"))
    g, beta = inputs["g"].unsqueeze(0), inputs["beta"].unsqueeze(0)
    kw = dict(initial_state=inputs.get("initial_state"), output_final_state=True,
              cu_seqlens=inputs["cu_seqlens"].to(torch.int64), scale=inputs.get("scale"))
    run(q, k, v, g, beta, **kw)  # the JIT compile of this layout (10-40 s), outside the timing

    def call():
        return run(q, k, v, g, beta, **kw)

    call.note = (f"FlashQLA {_dist_version('flash-qla', 'flash_qla')} (TileLang {_dist_version('tilelang')}); "
                 "grouped values as given, auto CP; int64 cu_seqlens, [1, T, H, D] views")
    return call


def _dist_version(*dists: str) -> str:
    from importlib.metadata import version

    for dist in dists:
        try:
            return version(dist)
        except Exception:
            continue
    return "?"


def _version() -> str:
    try:
        from importlib.metadata import version

        for dist in ("flash-linear-attention", "fla-core"):
            try:
                return version(dist)
            except Exception:
                continue
    except ImportError:
        pass
    return "?"
