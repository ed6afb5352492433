"""What every stage shares: the chunk size, the gates' log2 unit, the sequence lookup, the per-sequence
chunk and segment index (in registers, so the host never reads cu_seqlens back), the chunk state step and
the launch path every stage's launcher takes (_Launch, aka.launch's)."""

from __future__ import annotations

import triton
import triton.language as tl

# every stage launches through it: the first call of a key through Triton's JIT, later ones through Triton's C
# launcher with what the runner recomputes per launch kept (aka/launch.py; ~1/3 of the runner's host time a
# launch, four launches a call with CP)
from aka.launch import Launcher as _Launch  # noqa: F401 (the stages take it from here)

BT = 64  # chunk size: fixed, the inverse is written for 4 blocks of 16
# Value columns a serial program owns (its state block K x BV in registers; the CP policy counts programs
# with it, and the Gluon forward runs two such chains a CTA). 32 crashed on the H200 (Triton 3.6, illegal
# memory access); 128 ran slower (G1 631 vs 416 us, 2026-12-01).
BV = 64
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)  # gates in log2 units: exp(x) = exp2(x * LOG2E)


@triton.jit
def _locate(cu_ptr, idx, N, LOG_N: tl.constexpr):
    """Largest s in [0, N] with cu[s] <= idx (cu non-decreasing, cu[0] = 0); N when idx >= cu[N]."""
    lo = idx * 0
    hi = lo + N
    for _ in tl.static_range(LOG_N):
        mid = (lo + hi + 1) // 2
        val = tl.load(cu_ptr + mid)
        ok = val <= idx
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid - 1)
    return lo


@triton.jit
def _index(cu_ptr, cuc_ptr, cus_ptr, N, SEG, i_c, WRITE, BT: tl.constexpr, BLOCK: tl.constexpr):
    """The per-sequence chunk index from cu_seqlens [N+1] (N <= BLOCK), in registers, so the host never reads
    cu_seqlens back and no launch of its own computes it: (seq, first token of chunk i_c, the sequence's end,
    as int64), seq = N when i_c is past the last chunk. WRITE: also store the exclusive prefix sums of chunk
    counts (cuc [N+1]) and of segment counts (cus [N+1], segments of SEG chunks, at least one a sequence so an
    empty sequence still writes its final state), which the later stages read; one program of the prep does."""
    i = tl.arange(0, BLOCK)
    m = i < N
    b = tl.load(cu_ptr + i, mask=m, other=0)
    e = tl.load(cu_ptr + i + 1, mask=m, other=0)
    nch = (e - b + BT - 1) // BT
    ends = tl.cumsum(nch, 0)  # ends[s] = first chunk after sequence s (the lanes past N hold the total)
    if WRITE:
        nseg = tl.where(m, tl.maximum((nch + SEG - 1) // SEG, 1), 0)
        tl.store(cuc_ptr + 1 + i, ends, mask=m)
        tl.store(cus_ptr + 1 + i, tl.cumsum(nseg, 0), mask=m)
        z = tl.zeros([BLOCK], dtype=tl.int32)
        tl.store(cuc_ptr + i, z, mask=i == 0)
        tl.store(cus_ptr + i, z, mask=i == 0)
    seq = tl.minimum(tl.sum((ends <= i_c).to(tl.int32), 0), N)  # sequences that end at or before chunk i_c
    c0 = tl.sum(tl.where(i < seq, nch, 0), 0)
    bos = tl.load(cu_ptr + seq).to(tl.int64)
    eos = tl.load(cu_ptr + tl.minimum(seq + 1, N)).to(tl.int64)
    return seq, bos + (i_c - c0).to(tl.int64) * BT, eos


@triton.jit
def _ld(base, rows, m_rows, STRIDE: tl.constexpr, cols):
    return tl.load(base + (rows[:, None] * STRIDE + cols[None, :]), mask=m_rows[:, None], other=0.0)


@triton.jit
def _carry(b_h, b_kd, b_vd, b_gl):
    """The chunk's state step once its operands are formed: the carried state decays by the chunk's
    total gate, the chunk adds K^T V~ (the decay of each token folded into kd and vd by the caller).
    Both serial kernels step the state here."""
    return b_h * tl.exp2(b_gl) + tl.dot(tl.trans(b_kd), b_vd)

