"""Compression math: pure numpy functions on flat float32 gradients (no state, no policy).

Indices are uint32 positions in the flat Θ, sorted ascending; values are float32, unscaled gradients
(never pre-multiplied by the learning rate: lr·g falls into fp16's subnormal range).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

Q8_LEVELS = 127   # int8 codes in [−127, 127]: symmetric, so −128 is never used


def topk_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest |x|, sorted ascending: a function of the values alone.

    The rule, the same on every host: entries rank by |x|, a NaN above every number (+inf included);
    among entries of equal rank (a tie at the k-th value, several NaNs, zeros when fewer than k
    entries are nonzero) the lowest positions win. ``np.argpartition`` can't give that: which of the
    tied entries it keeps depends on the kernel numpy dispatched for the host's SIMD level (its AVX-512
    and AVX2 partitions pick different ones, measured), and an MLP's first-layer gradient is exactly 0
    on MNIST's blank border pixels, so ties are the rule there, not the exception.

    Only exact operations decide the result: the k-th largest value t (an order statistic, one value
    whichever algorithm finds it), comparisons with t, and positions in ascending order. The k-th
    largest is found among the nonzero entries (gathered with ``np.compress``: numpy's partition slows
    down up to 70× on arrays with many equal values, and numpy 2.4's boolean indexing is several times
    slower on such scattered masks; ``benchmarks/results/topk.json``)."""
    n = x.size
    k = max(1, min(int(k), n))
    if k == n:
        return np.arange(n, dtype=np.uint32)
    a = np.abs(x)
    nan = np.isnan(a)
    nans = int(np.count_nonzero(nan))
    if nans:
        if nans >= k:
            return np.flatnonzero(nan)[:k].astype(np.uint32)
        a = np.where(nan, np.float32(0), a)     # the NaNs are in; rank the numbers for the rest
        return np.union1d(np.flatnonzero(nan), _top_numbers(a, k - nans, exclude=nan)).astype(np.uint32)
    return _top_numbers(a, k).astype(np.uint32)


def _top_numbers(a: np.ndarray, k: int, exclude: Optional[np.ndarray] = None) -> np.ndarray:
    """Positions (ascending, int64) of the k largest of ``a`` ≥ 0 (no NaN), lowest positions first
    among ties; positions in ``exclude`` (a mask) are never picked."""
    v = np.compress(a != 0, a)
    if v.size < k:   # fewer than k nonzero: all of them, then the lowest-positioned zeros
        zeros = a == 0
        if exclude is not None:
            zeros &= ~exclude
        return np.union1d(np.flatnonzero(a != 0), np.flatnonzero(zeros)[:k - v.size])
    t = np.partition(v, v.size - k)[v.size - k]      # the k-th largest: t > 0
    keep = np.flatnonzero(a >= t)
    extra = keep.size - k
    if extra > 0:   # more than k at or above t: drop the highest-positioned entries equal to t
        tied = np.flatnonzero(a[keep] == t)
        keep = np.delete(keep, tied[tied.size - extra:])
    return keep


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
