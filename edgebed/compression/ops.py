"""Compression math: pure numpy functions on flat float32 gradients (no state, no policy).

Indices are uint32 positions in the flat Θ, sorted ascending; values are float32, unscaled gradients
(never pre-multiplied by the learning rate: lr·g falls into fp16's subnormal range).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

Q8_LEVELS = 127   # int8 codes in [−127, 127]: symmetric, so −128 is never used


def topk_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest |x| (ties: whichever argpartition picks), sorted ascending.

    numpy's argpartition slows down up to 70× on arrays with many equal values — a ReLU network's
    gradients hold many exact zeros (8–27 ms instead of 0.3 ms for the CNN's FC1 at c = 0.01,
    ``benchmarks/results/topk.json``). So the k-th largest, t, is found among the nonzero entries
    (a partition of values only); when no other entry ties with t, the k entries ≥ t are the only
    possible answer, so the result is argpartition's to the bit. A tie at t takes argpartition's
    own pick (fewer than k nonzero entries is such a tie, at 0).

    The nonzero entries are gathered with ``np.compress``, not ``a[a != 0]`` (same elements, same
    order): numpy 2.4's boolean indexing is several times slower on such scattered masks. AdaComp's
    per-layer selection on real CNN gradients after 500 / 3,000 SGD steps: 0.57 / 0.61 → 0.35 /
    0.35 ms, measured in one run (``benchmarks/results/topk.json``)."""
    n = x.size
    k = max(1, min(int(k), n))
    if k == n:
        return np.arange(n, dtype=np.uint32)
    a = np.abs(x)
    v = np.compress(a != 0, a)
    if v.size > k:
        top = np.partition(v, v.size - k)[v.size - k:]   # the k largest, a NaN counting as largest
        keep = np.flatnonzero(a >= top[0])               # top[0] > 0, so no zero
        # Unique when nothing ties with top[0] and no NaN is among the k (a NaN never compares ≥).
        if keep.size == k and not np.isnan(top).any():
            return keep.astype(np.uint32)
    idx = np.argpartition(a, n - k)[n - k:]
    idx.sort()
    return idx.astype(np.uint32)


def keep_count(size: int, c: float) -> int:
    """Entries kept out of ``size`` at ratio c: ceil, at least one."""
    return max(1, int(np.ceil(size * c)))


def top_c(x: np.ndarray, c: float) -> np.ndarray:
    """Comp-ASGD's selection: the fraction c of entries with the largest |x| over the whole vector."""
    return topk_indices(x, keep_count(x.size, c))


def top_c_per_layer(x: np.ndarray, c: float, bounds: Sequence[tuple[int, int]]) -> np.ndarray:
    """AdaComp's selection: the fraction c of each layer's entries (at least one per layer).
    ``bounds`` are (offset, size) of each weight tensor / bias vector in the flat vector."""
    return np.concatenate([topk_indices(x[off:off + size], keep_count(size, c)) + np.uint32(off)
                           for off, size in bounds])


def segment_counts(indices: Optional[np.ndarray], bounds: Sequence[tuple[int, int]], total: int) -> np.ndarray:
    """How many of the sent entries fall in each layer (dense: the layer sizes), as uint32."""
    if indices is None:
        return np.array([size for _, size in bounds], dtype=np.uint32)
    edges = np.array([off for off, _ in bounds] + [total], dtype=np.int64)
    return np.diff(np.searchsorted(indices, edges)).astype(np.uint32)


def quantize_q8(values: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Unbiased 8-bit stochastic quantization with one scale per segment (per layer tensor).

    Segment s has scale_s = max|v| / 127 and code = floor(v/scale_s + u), u ~ U[0, 1), so
    E[code·scale_s] = v. Returns (codes int8, scales float32, one per segment; 0 for an all-zero one)."""
    v = np.asarray(values, dtype=np.float32)
    seg = np.repeat(np.arange(counts.size), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    amax = np.zeros(counts.size, dtype=np.float32)
    nonempty = counts > 0
    if v.size:
        amax[nonempty] = np.maximum.reduceat(np.abs(v), starts[nonempty])
    scales = (amax / Q8_LEVELS).astype(np.float32)
    safe = np.where(scales > 0, scales, np.float32(1.0))
    x = v / safe[seg]
    codes = np.floor(x + rng.random(v.size, dtype=np.float32))
    return np.clip(codes, -Q8_LEVELS, Q8_LEVELS).astype(np.int8), scales


def dequantize_q8(codes: np.ndarray, scales: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """float32 values code·scale of their segment."""
    return codes.astype(np.float32) * np.repeat(scales.astype(np.float32), counts)


def take_sent(acc: np.ndarray, indices: Optional[np.ndarray], sent: np.ndarray) -> None:
    """Error feedback's bookkeeping, in place: acc ← acc − what was sent (the residual stays)."""
    if indices is None:
        acc -= sent
    else:
        acc[indices] -= sent
