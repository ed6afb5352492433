"""Deterministic, realistic inputs for a gdn_prefill shape case.

Distributions follow Qwen3-Next / Qwen3.5: q and k L2-normalised (the model normalises them before
the kernel), g = -exp(A_log) * softplus(a + dt_bias) with A = exp(A_log) ~ U(1, 16) per head and
dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 1e-1] (the models' initialisation), beta = sigmoid.

Variants (the contract's ``input_variants``; the gate cycles through them by round and shape):
- "qwen" as above (fast decay: most heads forget within tens of tokens, so an initial state barely
  matters), "mixed" (every other value head decays weakly: g ~ -1e-3, a state survives thousands of
  tokens) and "weak" (every head so). A kernel that drops h0 or a segment's carried state on some
  path passes "qwen" bit for bit and fails the other two.
- "correlated": keys as real text makes them, in clusters around a few directions (k_i . k_j of
  0.5-0.95 within a cluster) with one token in eight repeating an earlier key exactly, over "mixed"
  gates. The chunk's (I + A) is far from the identity: an inverse or a K K^T that loses precision
  shows here and not with random keys (k_i . k_j ~ 0.09).
- "shifting": gates that change speed inside a sequence: each head switches between Qwen-fast and
  weak gates at a random token, odd heads the other way round, so a per-segment decision (a
  context-parallel warm-up) goes both ways within one sequence and one call.
- "fast": every other head forgets very fast (g in [-4, -1.5] per token: |sum g| over a chunk of
  100-250, where a separable exp(-gamma) overflows fp32) beside weakly decaying heads.
A case's ``decay`` > 0 replaces g for every variant.
"""

from __future__ import annotations

import math

import torch


def _gen(seed: int, device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


VARIANTS = ("qwen", "mixed", "weak", "correlated", "shifting", "fast")


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
    k = torch.nn.functional.normalize(_clustered(randn, rand, T, HK, D) if variant == "correlated"
                                      else randn(T, HK, D), dim=-1).to(torch.bfloat16)
    v = randn(T, HV, D).to(torch.bfloat16)
    A = 1.0 + 15.0 * rand(HV)
    dt = torch.exp(math.log(1e-3) + (math.log(1e-1) - math.log(1e-3)) * rand(HV))
    dt_bias = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
    a = randn(T, HV)
    g = -A * torch.nn.functional.softplus(a + dt_bias)
    weak = -1e-3 * torch.exp(0.5 * randn(T, HV))  # A = 1 and dt ~ 1e-3: the slowest heads the models have
    odd = torch.arange(HV, device=device) % 2 == 1
    if variant in ("mixed", "correlated"):
        g = torch.where(odd[None, :], weak, g)
    elif variant == "weak":
        g = weak
    elif variant == "shifting":  # a switch token per (sequence, head): fast before it on even heads, weak after
        n_tok = torch.tensor(lens, device=device, dtype=torch.float32)
        start = torch.tensor(list(_cumsum([0] + lens))[:len(lens)], device=device, dtype=torch.float32)
        cut = start[:, None] + rand(len(lens), HV) * n_tok[:, None]  # [N, HV]
        cut = torch.repeat_interleave(cut, torch.tensor(lens, device=device), dim=0)  # [T, HV]
        early = torch.arange(T, device=device)[:, None] < cut
        g = torch.where(early != odd[None, :], g, weak)
    elif variant == "fast":
        g = torch.where(odd[None, :], weak, -(1.5 + 2.5 * rand(T, HV)))
    if case.decay > 0:  # the gates' speed set by the case (warm-up truncation cases), every head alike
        g = -case.decay * torch.exp(0.25 * randn(T, HV))
    beta = torch.sigmoid(randn(T, HV))
    cu = torch.tensor([0] + list(_cumsum(lens)), dtype=torch.int32, device=device)
    out = {"q": q, "k": k, "v": v, "g": g.contiguous(), "beta": beta.contiguous(), "cu_seqlens": cu}
    if case.initial_state:
        # A state of the magnitude a few hundred tokens of k v^T leave behind.
        out["initial_state"] = 0.1 * randn(len(lens), HV, D, D)
    return out


def _clustered(randn, rand, T: int, HK: int, D: int) -> torch.Tensor:
    """Keys around 4 directions per head (cosine 0.5-0.95 within a direction), one in eight a copy of
    the key 1-40 tokens before it (a repeated token)."""
    protos = torch.nn.functional.normalize(randn(4, HK, D), dim=-1)
    which = (rand(T, HK) * 4).long().clamp(max=3)
    # |noise|^2 = D s^2 against a unit direction: cosine ~ 1 / (1 + D s^2), s^2 D in [0.05, 1]
    s = torch.sqrt((0.05 + 0.95 * rand(T, HK, 1)) / D)
    k = torch.gather(protos, 0, which[:, :, None].expand(T, HK, D)) + s * randn(T, HK, D)
    back = 1 + (rand(T) * 40).long()
    src = torch.arange(T, device=k.device) - back
    repeat = (rand(T) < 0.125) & (src >= 0)
    k[repeat] = k[src[repeat]]
    return k


def _cumsum(xs):
    total = 0
    for x in xs:
        total += x
        yield total


def refresh(case, base: dict, seed: int) -> dict:
    """The inputs of a timed call (aka.evaluate.host.rotation): q, k and v with every (token, head) row's sign drawn
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
