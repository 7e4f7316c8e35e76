"""Running statistics in Θ (``model.buffers: average``): the bounds a push's statistics must keep.

Θ's last ``statistics`` entries are the running means and variances of normalisation layers
(``models.py``), and the averaging rules' pushes carry deltas of them like of the weights. The weights
are bounded by ``max_step`` × their initial scale (``ParameterServer.value_limit``); the statistics
apart, by ``max_step``² × theirs (max(1, ‖statistics(Θ₀)‖∞): BatchNorm's variances start at 1): a
variance is a second moment, so weights that may move by ``max_step`` times their scale may move it by
the square of that — a variance 5,000 times its start is let through, a delta of 10³⁰ is not. And a
running variance never goes below zero: BatchNorm divides by √(var + ε), so a negative one makes every
evaluation NaN. A push whose application would take one below zero is refused (checked against Θ now,
in float32 as the rules add it: an honest delta x − Θ with x ≥ 0 always passes, and the mean of
deltas that each pass passes too); the PS clamps what rounding of such a mean may leave at −0.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .aggregate import max_abs

NEGATIVE = "a running variance would fall below zero (BatchNorm's running_var must stay ≥ 0)"
NOT_FINITE = "values contain NaN or Inf"
TOO_LARGE = ("values out of bounds: they would move a running statistic by far more than its own scale "
             "(max_step²)")


class StatisticsBound:
    """The statistics' part of Θ: where it starts, which of its entries are variances, its bound."""

    def __init__(self, theta: np.ndarray, statistics: int, variances: tuple, max_step: float, sign: float):
        """``variances``: (offset, size) in Θ of each running variance; ``sign``: how a pushed value
        moves Θ (+1: the averaging rules add deltas; −α for a gradient rule, its largest step)."""
        self.first = theta.size - statistics
        self.is_var = np.zeros(statistics, bool)
        for off, size in variances:
            if not (self.first <= off and off + size <= theta.size):
                raise ValueError(f"running variance at {off}..{off + size} is outside Θ's statistics "
                                 f"({self.first}..{theta.size})")
            self.is_var[off - self.first:off - self.first + size] = True
        self.var = np.flatnonzero(self.is_var)   # tail-relative indices of the variances
        tail = theta[self.first:]
        self.anchor = max(1.0, max_abs(tail)) if tail.size else 1.0
        self.limit = max_step * max_step * self.anchor / max(abs(sign), 1e-300)
        self.sign = np.float32(sign)

    def problem(self, theta: np.ndarray, values: np.ndarray, indices: Optional[np.ndarray]) -> Optional[str]:
        """Why the statistics in this push may not be applied to ``theta`` (None: they may). ``indices``
        strictly increasing and < |Θ| (checked before), or None for a dense push."""
        if indices is None:
            v, k = values[self.first:], None
        else:
            cut = int(np.searchsorted(indices, self.first))
            v, k = values[cut:], indices[cut:].astype(np.intp) - self.first
        if not v.size:
            return None
        top = max_abs(v)
        if not math.isfinite(top):
            return NOT_FINITE
        if top > self.limit:
            return TOO_LARGE
        tail = theta[self.first:]
        if k is None:
            new = tail[self.var] + self.sign * v[self.var].astype(np.float32, copy=False)
        else:
            sel = self.is_var[k]
            new = tail[k[sel]] + self.sign * v[sel].astype(np.float32, copy=False)
        if new.size and not float(new.min()) >= 0.0:
            return NEGATIVE
        return None

    def weights(self, values: np.ndarray, indices: Optional[np.ndarray]) -> tuple:
        """The push's weights' part: (values, indices, entries of Θ they index)."""
        if indices is None:
            return values[:self.first], None, self.first
        cut = int(np.searchsorted(indices, self.first))
        return values[:cut], indices[:cut], self.first

    def clamp(self, theta: np.ndarray) -> None:
        """Variances that rounding left a hair below zero (a mean of deltas that each passed) → 0."""
        if self.var.size:
            tail = theta[self.first:]
            v = tail[self.var]
            if float(v.min()) < 0.0:
                tail[self.var] = np.maximum(v, 0.0)
