#!/usr/bin/env python3
"""Tb error of the gate-free prep inverse (FlashQLA's order) against the gated one, in float64 on CPU.

Per chunk of 64 keys: the exact Tb = (I + M . G)^-1 diag(beta) in float64; "gated" = that inverse
in fp32 stored bf16 (aka's prep); "ungated" = Ar = (I + M)^-1 in fp32 stored bf16, then G . Ar . beta_j
in fp32 stored bf16 (FlashQLA's kkt_solve + fused kernel). Keys normalised bf16, optionally
correlated (k ~ corr u + (1 - corr) n); gates g ~ -gate_scale U(0, 1) per token. Prints median / max
relative error over 20 chunks and the largest |Ar| entry (growth of the undamped inverse).

    python3 scripts/device/gdn_ungated_error.py
"""

import torch


def keys(n, d, corr, gen):
    k = torch.randn(n, d, generator=gen, dtype=torch.float64)
    if corr:
        u = torch.randn(1, d, generator=gen, dtype=torch.float64)
        k = corr * u / u.norm() + (1 - corr) * k / k.norm(dim=-1, keepdim=True)
    return torch.nn.functional.normalize(k, dim=-1).to(torch.bfloat16).double()
def run(corr, gscale, trials=20):
    gen = torch.Generator().manual_seed(1)
    e_g, e_u, grow = [], [], []
    for _ in range(trials):
        k = keys(64, 128, corr, gen)
        beta = torch.sigmoid(torch.randn(64, generator=gen, dtype=torch.float64))
        if corr:
            beta = 0.5 + 0.5 * beta
        g = -gscale * torch.rand(64, generator=gen, dtype=torch.float64)  # per-token log decay
        gam = g.cumsum(0)
        M = torch.tril(beta[:, None] * (k @ k.T), -1)
        G = torch.tril(torch.exp(gam[:, None] - gam[None, :]))
        I = torch.eye(64, dtype=torch.float64)
        Tg = torch.linalg.solve_triangular(I + M * G, I, upper=False) * beta[None, :]  # exact gated Tb
        # ours: gated inverse in fp32, stored bf16
        Tg32 = torch.linalg.solve_triangular((I + M * G).float(), I.float(), upper=False) * beta[None, :].float()
        ours = Tg32.to(torch.bfloat16).double()
        # FlashQLA's: ungated inverse in fp32, stored bf16, then G . Ar . beta_j in fp32
        Ar = torch.linalg.solve_triangular((I + M).float(), I.float(), upper=False).to(torch.bfloat16).double()
        qla = (G * Ar * beta[None, :]).float().to(torch.bfloat16).double()
        e_g.append(((ours - Tg).norm() / Tg.norm()).item())
        e_u.append(((qla - Tg).norm() / Tg.norm()).item())
        grow.append(Ar.abs().max().item())
    def med(xs):
        return sorted(xs)[len(xs) // 2]

    return med(e_g), max(e_g), med(e_u), max(e_u), max(grow)
if __name__ == "__main__":
    print("corr gate_scale | gated-bf16 err med/max | ungated err med/max | max |Ar|")
    for corr in (0.0, 0.5, 0.9, 0.99):
        for gs in (0.01, 0.5, 5.0):
            r = run(corr, gs)
            print(f"{corr:4} {gs:5} | {r[0]:.2e} / {r[1]:.2e} | {r[2]:.2e} / {r[3]:.2e} | {r[4]:.1f}")
