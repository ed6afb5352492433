"""What every stage shares: the chunk size, the gates' log2 unit, the sequence lookup, the per-sequence
chunk and segment index (one launch, so the host never reads cu_seqlens back), the chunk state step and
the launch path every stage's launcher takes (_Launch, aka.launch's)."""

from __future__ import annotations

import triton
import triton.language as tl

# every stage launches through it: the first call of a key through Triton's JIT, later ones through Triton's C
# launcher with what the runner recomputes per launch kept (aka/launch.py; ~1/3 of the runner's host time a
# launch, five launches a call with CP)
from aka.launch import Launcher as _Launch

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
def _index_kernel(cu_ptr, cuc_ptr, cus_ptr, N, SEG, BT: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    m = i < N
    b = tl.load(cu_ptr + i, mask=m, other=0)
    e = tl.load(cu_ptr + i + 1, mask=m, other=0)
    nch = (e - b + BT - 1) // BT
    # at least one segment per sequence so an empty sequence still writes its final state
    nseg = tl.where(m, tl.maximum((nch + SEG - 1) // SEG, 1), 0)
    tl.store(cuc_ptr + 1 + i, tl.cumsum(nch, 0), mask=m)
    tl.store(cus_ptr + 1 + i, tl.cumsum(nseg, 0), mask=m)
    z = tl.zeros([BLOCK], dtype=tl.int32)
    tl.store(cuc_ptr + i, z, mask=i == 0)
    tl.store(cus_ptr + i, z, mask=i == 0)


@triton.jit
def _chunk_t0(cu_ptr, cuc_ptr, seq, i_c, BT: tl.constexpr):
    """First token of chunk i_c (a global chunk index, inside sequence seq) and its sequence's end."""
    bos = tl.load(cu_ptr + seq).to(tl.int64)
    eos = tl.load(cu_ptr + seq + 1).to(tl.int64)
    c0 = tl.load(cuc_ptr + seq)
    return bos + (i_c - c0).to(tl.int64) * BT, eos


@triton.jit
def _ld(base, rows, m_rows, STRIDE: tl.constexpr, cols):
    return tl.load(base + (rows[:, None] * STRIDE + cols[None, :]), mask=m_rows[:, None], other=0.0)


@triton.jit
def _carry(b_h, b_kd, b_vd, b_gl):
    """The chunk's state step once its operands are formed: the carried state decays by the chunk's
    total gate, the chunk adds K^T V~ (the decay of each token folded into kd and vd by the caller).
    Both serial kernels step the state here."""
    return b_h * tl.exp2(b_gl) + tl.dot(tl.trans(b_kd), b_vd)


_INDEX_LAUNCH = _Launch(_index_kernel)  # the entry's launch (stages render after the entry)
