import torch


def make_inputs(case, seed: int, device="cpu") -> dict:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return {"x": torch.randn(case.n, generator=gen, device=device),
            "y": torch.randn(case.n, generator=gen, device=device)}
