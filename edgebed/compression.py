"""Compressors: what a device sends of its gradient. Pure functions + one small class each.

``dense`` sends every entry; ``top-c`` keeps the fraction c of entries with the largest magnitude over
the whole model (Comp-ASGD, as in Shokri & Shmatikov); ``top-c-per-layer`` keeps the fraction c of each
weight tensor and each bias vector separately (AdaComp), at least one entry per layer.
Indices are uint32 positions in the flat Θ, sorted ascending; values are float32, unscaled gradients.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np


def topk_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest |x| (ties: whichever argpartition picks), sorted ascending."""
    n = x.size
    k = max(1, min(int(k), n))
    if k == n:
        return np.arange(n, dtype=np.uint32)
    idx = np.argpartition(np.abs(x), n - k)[n - k:]
    idx.sort()
    return idx.astype(np.uint32)


def keep_count(size: int, c: float) -> int:
    """Entries kept out of ``size`` at ratio c: ceil, at least one."""
    return max(1, int(np.ceil(size * c)))


@dataclass
class Sparse:
    values: np.ndarray             # float32
    indices: Optional[np.ndarray]  # uint32, or None for a dense payload

    @property
    def entries(self) -> int:
        return int(self.values.size)


class Compressor:
    name = "dense"

    def compress(self, grad: np.ndarray) -> Sparse:
        return Sparse(np.ascontiguousarray(grad, dtype=np.float32), None)


class TopC(Compressor):
    name = "top-c"

    def __init__(self, c: float):
        self.c = c

    def compress(self, grad: np.ndarray) -> Sparse:
        idx = topk_indices(grad, keep_count(grad.size, self.c))
        return Sparse(grad[idx].astype(np.float32), idx)


class TopCPerLayer(Compressor):
    name = "top-c-per-layer"

    def __init__(self, c: float, layers: Sequence):
        self.c = c
        self.bounds = [(l.offset, l.size) for l in layers]

    def compress(self, grad: np.ndarray) -> Sparse:
        parts = [topk_indices(grad[off:off + size], keep_count(size, self.c)) + np.uint32(off)
                 for off, size in self.bounds]
        idx = np.concatenate(parts)
        return Sparse(grad[idx].astype(np.float32), idx)


def make_compressor(name: str, c: float, layers: Sequence) -> Compressor:
    if name == "dense":
        return Compressor()
    if name == "top-c":
        return TopC(c)
    if name == "top-c-per-layer":
        return TopCPerLayer(c, layers)
    raise ValueError(f"unknown compressor {name!r}")
