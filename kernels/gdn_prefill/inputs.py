"""Deterministic, realistic inputs for a gdn_prefill shape case.

Distributions follow Qwen3-Next / Qwen3.5: q and k L2-normalised (the model normalises them before
the kernel), g = -exp(A_log) * softplus(a + dt_bias) with A = exp(A_log) ~ U(1, 16) per head and
dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 1e-1] (the models' initialisation), beta = sigmoid.

Variants (the contract's ``input_variants``; the gate cycles through them by round): "qwen" as above
(fast decay: most heads forget within tens of tokens, so an initial state barely matters), "mixed"
(every other value head decays weakly: g ~ -1e-3, a state survives thousands of tokens) and "weak"
(every head so). A kernel that drops h0 or a segment's carried state on some path passes "qwen"
bit for bit and fails the other two. A case's ``decay`` > 0 replaces g for every variant.
"""

from __future__ import annotations

import math

import torch


def _gen(seed: int, device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


VARIANTS = ("qwen", "mixed", "weak")


def make_inputs(case, seed: int, device="cpu", variant: str = "qwen") -> dict:
    """Tensors for one call: q, k, v, g, beta, cu_seqlens and (when the case asks) initial_state."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: choose one of {VARIANTS}")
    gen = _gen(seed, device)
    lens = list(case.seqlens)
    T, HK, HV, D = sum(lens), case.hk, case.hv, case.dim
    if HV % HK:
        raise ValueError(f"{case.id}: hv={HV} is not a multiple of hk={HK}")

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32)

    def rand(*shape):
        return torch.rand(*shape, generator=gen, device=device, dtype=torch.float32)

    q = torch.nn.functional.normalize(randn(T, HK, D), dim=-1).to(torch.bfloat16)
    k = torch.nn.functional.normalize(randn(T, HK, D), dim=-1).to(torch.bfloat16)
    v = randn(T, HV, D).to(torch.bfloat16)
    A = 1.0 + 15.0 * rand(HV)
    dt = torch.exp(math.log(1e-3) + (math.log(1e-1) - math.log(1e-3)) * rand(HV))
    dt_bias = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
    a = randn(T, HV)
    g = -A * torch.nn.functional.softplus(a + dt_bias)
    weak = -1e-3 * torch.exp(0.5 * randn(T, HV))  # A = 1 and dt ~ 1e-3: the slowest heads the models have
    if variant != "qwen":
        heads = torch.arange(HV, device=device) % 2 == 1 if variant == "mixed" else torch.ones(HV, dtype=torch.bool,
                                                                                                device=device)
        g = torch.where(heads[None, :], weak, g)
    if case.decay > 0:  # the gates' speed set by the case (warm-up truncation cases), every head alike
        g = -case.decay * torch.exp(0.25 * randn(T, HV))
    beta = torch.sigmoid(randn(T, HV))
    cu = torch.tensor([0] + list(_cumsum(lens)), dtype=torch.int32, device=device)
    out = {"q": q, "k": k, "v": v, "g": g.contiguous(), "beta": beta.contiguous(), "cu_seqlens": cu}
    if case.initial_state:
        # A state of the magnitude a few hundred tokens of k v^T leave behind.
        out["initial_state"] = 0.1 * randn(len(lens), HV, D, D)
    return out


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total


def refresh(case, base: dict, seed: int) -> dict:
    """The inputs of a timed call (aka.evaluate.rotation): q, k and v with every (token, head) row's sign drawn
    anew from ``seed`` (their distributions are symmetric, so the inputs stay as realistic), g, beta
    and the state as in ``base``. The state recurrence sees other keys and values, the output another
    query: nothing is reusable, for one elementwise pass per tensor instead of generating anew."""
    gen = _gen(seed, base["q"].device)
    out = dict(base)
    for name in ("q", "k", "v"):
        t = base[name]
        sign = torch.randint(0, 2, (*t.shape[:2], 1), generator=gen, device=t.device).to(t.dtype) * 2 - 1
        out[name] = t * sign
    return out
