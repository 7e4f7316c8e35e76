"""Compressors: what a device sends of its gradient. One small class each behind ``Compressor``.

A compressor is a device's own object (one per device, for its lifetime): ``compress(grad)`` turns
one flat float32 gradient into a ``Sparse`` payload; stateful ones (error feedback) keep their
residual between calls, and ``reset()`` drops it (the device rejoined with a new session).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from . import ops


@dataclass
class Sparse:
    values: np.ndarray             # float32: what the PS applies (quantized values already dequantized)
    indices: Optional[np.ndarray]  # uint32 positions in Θ, ascending, or None for a dense payload
    # q8 compressors: (int8 codes, float32 scale per layer, uint32 entries per layer); the compact
    # wire encoding sends these instead of float values (values == codes · scale of their layer).
    q8: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None

    @property
    def entries(self) -> int:
        return int(self.values.size)


Bounds = Sequence[tuple[int, int]]   # (offset, size) of each weight tensor and bias vector in Θ


class Compressor:
    """Dense: every entry, float32."""
    name = "dense"

    @classmethod
    def build(cls, c: float, layers: Sequence) -> "Compressor":
        """This selection at ratio ``c`` for a model of ``layers`` (``models.Layer``: offset, size)."""
        return cls()

    @staticmethod
    def kept(c: float, bounds: Bounds) -> Optional[tuple[Bounds, list[int]]]:
        """Where the sent entries fall: (segments of Θ, entries kept in each); None: all of them."""
        return None

    def compress(self, grad: np.ndarray) -> Sparse:
        return Sparse(np.ascontiguousarray(grad, dtype=np.float32), None)

    def reset(self) -> None:
        """Forget any state carried between pushes (called when the device rejoins)."""


class TopC(Compressor):
    """Comp-ASGD: the fraction c of entries with the largest |g| over the whole model."""
    name = "top-c"

    def __init__(self, c: float):
        self.c = c

    @classmethod
    def build(cls, c: float, layers: Sequence) -> "Compressor":
        return cls(c)

    @staticmethod
    def kept(c: float, bounds: Bounds) -> Optional[tuple[Bounds, list[int]]]:
        total = sum(size for _, size in bounds)
        return ((0, total),), [ops.keep_count(total, c)]

    def compress(self, grad: np.ndarray) -> Sparse:
        idx = ops.top_c(grad, self.c)
        return Sparse(grad[idx].astype(np.float32), idx)


class TopCPerLayer(Compressor):
    """AdaComp: the fraction c of each weight tensor and bias vector, at least one entry each."""
    name = "top-c-per-layer"

    def __init__(self, c: float, layers: Sequence):
        self.c = c
        self.bounds = [(l.offset, l.size) for l in layers]

    @classmethod
    def build(cls, c: float, layers: Sequence) -> "Compressor":
        return cls(c, layers)

    @staticmethod
    def kept(c: float, bounds: Bounds) -> Optional[tuple[Bounds, list[int]]]:
        return bounds, [ops.keep_count(size, c) for _, size in bounds]

    def compress(self, grad: np.ndarray) -> Sparse:
        idx = ops.top_c_per_layer(grad, self.c, self.bounds)
        return Sparse(grad[idx].astype(np.float32), idx)


class Quantize8(Compressor):
    """8-bit unbiased stochastic quantization of what ``inner`` selects, one scale per layer tensor."""

    def __init__(self, inner: Compressor, layers: Sequence, rng: np.random.Generator):
        self.inner, self.rng = inner, rng
        self.bounds = [(l.offset, l.size) for l in layers]
        self.total = sum(size for _, size in self.bounds)
        self.name = f"{inner.name}+q8"

    def compress(self, grad: np.ndarray) -> Sparse:
        s = self.inner.compress(grad)
        counts = ops.segment_counts(s.indices, self.bounds, self.total)
        codes, scales = ops.quantize_q8(s.values, counts, self.rng)
        return Sparse(ops.dequantize_q8(codes, scales, counts), s.indices, (codes, scales, counts))

    def reset(self) -> None:
        self.inner.reset()


class ErrorFeedback(Compressor):
    """Error feedback (Seide et al. 2014; Stich et al. 2018): the device keeps the residual of what it
    did not send and adds it to its next gradient, so every entry is eventually sent.

    With ``momentum`` m > 0, Deep Gradient Compression's momentum correction (Lin et al. 2018): the
    device accumulates the velocity u ← m·u + g instead of g, and clears u where it sent (momentum
    factor masking), so the PS keeps applying plain SGD steps. The residual lives on the device only."""

    def __init__(self, inner: Compressor, momentum: float = 0.0):
        self.inner, self.momentum = inner, float(momentum)
        self.residual: Optional[np.ndarray] = None   # v: gradient not sent yet
        self.velocity: Optional[np.ndarray] = None   # u (momentum correction only)
        self.name = f"ef({inner.name}{f', m={momentum:g}' if momentum else ''})"

    def compress(self, grad: np.ndarray) -> Sparse:
        g = np.asarray(grad, dtype=np.float32)
        if self.residual is None:
            self.residual = np.zeros_like(g)
            self.velocity = np.zeros_like(g) if self.momentum else None
        if self.momentum:
            self.velocity *= np.float32(self.momentum)
            self.velocity += g
            self.residual += self.velocity
        else:
            self.residual += g
        sent = self.inner.compress(self.residual)
        sent.values = sent.values.copy()   # a private copy: the residual changes in place below
        ops.take_sent(self.residual, sent.indices, sent.values)
        if self.momentum:
            if sent.indices is None:
                self.velocity[:] = 0.0
            else:
                self.velocity[sent.indices] = 0.0
        return sent

    def reset(self) -> None:
        self.residual = self.velocity = None
        self.inner.reset()
