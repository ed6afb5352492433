"""Gated DeltaNet prefill references.

``recurrence`` is the float64 token-by-token recurrence, written for clarity. ``chunked`` is the
independent chunked (UT-transform) form of OPS.md; the tests check the two agree. ``reference``, the
ground truth every kernel is checked against, is the recurrence on CPU and the float64 chunked form
on a GPU (launch count: see its docstring), and ``plain`` runs the chunked form in float32 on the bf16 inputs as the
"straightforward same-precision implementation" the gate compares a candidate's error with.

Shapes: q, k [T, HK, K]; v [T, HV, V]; g, beta [T, HV]; cu_seqlens [N+1]; state [N, HV, K, V].
"""

from __future__ import annotations

import torch


def _bounds(cu_seqlens: torch.Tensor) -> list[tuple[int, int]]:
    cu = cu_seqlens.tolist()
    return list(zip(cu[:-1], cu[1:]))


def _head_map(hk: int, hv: int, device) -> torch.Tensor:
    # value head h reads q/k head h // (HV / HK)
    return torch.arange(hv, device=device) // (hv // hk)


@torch.no_grad()
def reference(q, k, v, g, beta, cu_seqlens, initial_state=None, scale=None, algorithm="auto"):
    """The float64 ground truth the gate checks against.

    algorithm "recurrence": the token loop below. "chunked": the chunked form in float64 (equal to the
    recurrence to ~1e-13 in tests/contract/test_references.py, edge cases included). "auto" (what
    the gate gets): chunked on a GPU, where the token loop launches ~8 kernels per token (~260k for
    G4, against ~13k for the chunked form): the likely bulk of the 60-90 s that a full-set gate took on
    the H200 (inferred, not profiled); the recurrence on CPU."""
    if algorithm == "auto":
        algorithm = "chunked" if q.is_cuda else "recurrence"
    if algorithm == "chunked":
        return chunked(q, k, v, g, beta, cu_seqlens, initial_state, scale, dtype=torch.float64)
    if algorithm != "recurrence":
        raise ValueError(f"algorithm {algorithm!r}: choose auto, recurrence or chunked")
    return recurrence(q, k, v, g, beta, cu_seqlens, initial_state, scale)


@torch.no_grad()
def recurrence(q, k, v, g, beta, cu_seqlens, initial_state=None, scale=None):
    """Float64 recurrence: h <- e^g h; v~ = beta (v - h^T k); h <- h + k v~^T; o = h^T (scale q)."""
    T, HK, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    scale = K**-0.5 if scale is None else scale
    dev = q.device
    f64 = torch.float64
    heads = _head_map(HK, HV, dev)
    qd, kd, vd = q.to(f64)[:, heads], k.to(f64)[:, heads], v.to(f64)
    gd, bd = g.to(f64), beta.to(f64)
    bounds = _bounds(cu_seqlens)
    o = torch.zeros(T, HV, V, dtype=f64, device=dev)
    final = torch.zeros(len(bounds), HV, K, V, dtype=f64, device=dev)
    for n, (bos, eos) in enumerate(bounds):
        h = torch.zeros(HV, K, V, dtype=f64, device=dev)
        if initial_state is not None:
            h = initial_state[n].to(f64).clone()
        for t in range(bos, eos):
            h = h * torch.exp(gd[t])[:, None, None]
            v_new = bd[t][:, None] * (vd[t] - torch.einsum("hkv,hk->hv", h, kd[t]))
            h = h + kd[t][:, :, None] * v_new[:, None, :]
            o[t] = torch.einsum("hkv,hk->hv", h, qd[t] * scale)
        final[n] = h
    return o, final


@torch.no_grad()
def chunked(
    q, k, v, g, beta, cu_seqlens, initial_state=None, scale=None, chunk=64, dtype=torch.float64, operands=None
):
    """The chunked form of OPS.md, computed in ``dtype``: an independent formulation of the same maths.

    ``operands``: when set (e.g. torch.bfloat16), every matrix product rounds its operands to that
    dtype first and accumulates in ``dtype`` — what a tensor-core kernel does.
    """

    def mm(a, b):
        if operands is None:
            return a @ b
        return a.to(operands).to(dtype) @ b.to(operands).to(dtype)

    T, HK, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    scale = K**-0.5 if scale is None else scale
    dev = q.device
    heads = _head_map(HK, HV, dev)
    # [HV, T, D] layouts make the per-chunk products plain batched matmuls over heads.
    Q = q.to(dtype)[:, heads].transpose(0, 1)
    Kk = k.to(dtype)[:, heads].transpose(0, 1)
    Vv = v.to(dtype).transpose(0, 1)
    G = g.to(dtype).transpose(0, 1)
    Bt = beta.to(dtype).transpose(0, 1)
    bounds = _bounds(cu_seqlens)
    o = torch.zeros(HV, T, V, dtype=dtype, device=dev)
    final = torch.zeros(len(bounds), HV, K, V, dtype=dtype, device=dev)
    for n, (bos, eos) in enumerate(bounds):
        S = torch.zeros(HV, K, V, dtype=dtype, device=dev)
        if initial_state is not None:
            S = initial_state[n].to(dtype).clone()
        for s in range(bos, eos, chunk):
            e = min(s + chunk, eos)
            c = e - s
            qc, kc, vc, bc = Q[:, s:e], Kk[:, s:e], Vv[:, s:e], Bt[:, s:e]
            gam = torch.cumsum(G[:, s:e], dim=1)  # [HV, c]
            Gam = torch.exp(gam[:, :, None] - gam[:, None, :])
            lower = torch.tril(torch.ones(c, c, dtype=torch.bool, device=dev), -1)
            causal = torch.tril(torch.ones(c, c, dtype=torch.bool, device=dev))
            A = torch.where(lower, bc[:, :, None] * mm(kc, kc.transpose(1, 2)) * Gam, 0.0)
            eye = torch.eye(c, dtype=dtype, device=dev).expand(HV, c, c)
            Tinv = torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True)
            W = mm(Tinv, (bc * torch.exp(gam))[:, :, None] * kc)
            U = mm(Tinv, bc[:, :, None] * vc)
            Vt = U - mm(W, S)
            P = torch.where(causal, mm(qc, kc.transpose(1, 2)) * Gam, 0.0)
            o[:, s:e] = scale * (torch.exp(gam)[:, :, None] * mm(qc, S) + mm(P, Vt))
            decay_out = torch.exp(gam[:, -1:] - gam)  # e^{gamma_C - gamma}
            S = torch.exp(gam[:, -1])[:, None, None] * S + mm((decay_out[:, :, None] * kc).transpose(1, 2), Vt)
        final[n] = S
    return o.transpose(0, 1).contiguous(), final


@torch.no_grad()
def plain(q, k, v, g, beta, cu_seqlens, initial_state=None, scale=None):
    """Same-precision baseline for the gate: the chunked form with bf16 matmul operands and float32
    accumulation and state (what a plain tensor-core kernel does), output rounded to bf16."""
    o, final = chunked(
        q, k, v, g, beta, cu_seqlens, initial_state, scale, dtype=torch.float32, operands=torch.bfloat16
    )
    return o.to(q.dtype), final
