"""The decode attention in plain torch operators, handed to aka.launch.Launcher as if it were a kernel: a
fake JIT function whose "compiled kernel" is the candidate's own callable. The launcher is the one part of
aka a candidate may import; it must not carry work past the gate's run-time launch check. Correct, and no
Triton kernel runs. Op: fa4_decode."""

import math

import torch

from aka.launch import Launcher


def _attention(q, k_cache, v_cache, page_table, kv_lens, o, scale):
    rows, hq, d = q.shape
    _, page, hkv, _ = k_cache.shape
    q_len = rows // kv_lens.shape[0]
    for n, kv in enumerate(kv_lens.tolist()):
        pages = page_table[n].tolist()[: (kv + page - 1) // page]
        keys = torch.cat([k_cache.select(0, int(p)) for p in pages]).narrow(0, 0, kv).float()
        vals = torch.cat([v_cache.select(0, int(p)) for p in pages]).narrow(0, 0, kv).float()
        for j in range(q_len):
            pos = kv - q_len + j
            for h in range(hq):
                kh = keys.select(1, h // (hq // hkv)).narrow(0, 0, pos + 1)
                vh = vals.select(1, h // (hq // hkv)).narrow(0, 0, pos + 1)
                s = (q[n * q_len + j, h].float() * kh).sum(-1) * scale
                w = math.e ** (s - s.max())
                o[n * q_len + j, h] = ((w.unsqueeze(-1) * vh).sum(0) / w.sum()).to(q.dtype)


class _Kernel:
    """Looks like a JIT function to the launcher, and its result like a compiled kernel."""

    packed_metadata = ()
    arg_names = ["q", "k_cache", "v_cache", "page_table", "kv_lens", "o", "scale"]

    def __getitem__(self, grid):
        return self

    def __call__(self, *args):
        _attention(*args)
        return self


_LAUNCH = Launcher(_Kernel())


def fa4_decode(q, k_cache, v_cache, page_table, kv_lens, softmax_scale=None):
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    o = torch.empty_like(q)
    _LAUNCH((1,), (q, k_cache, v_cache, page_table, kv_lens, o, scale), {})
    return o
