"""ASGD: Θ ← Θ − (α/τ)·g with τ the global staleness of the update (α when τ = 0)."""
from __future__ import annotations

import numpy as np

from ..aggregate import apply_dense, apply_sparse, dense_compiled, staleness_lr
from ...algorithms.params import ASGDParams
from .base import Applied, UpdateRule


class ASGD(UpdateRule):
    Params = ASGDParams

    _scratch = None   # |Θ| float32, so a dense apply on numpy's path allocates nothing (the compiled one needs none)

    def apply(self, device, staleness, values, indices):
        lr = float(staleness_lr(self.lr, staleness))
        if indices is None:
            if self._scratch is None and not dense_compiled(self.theta, values):
                self._scratch = np.empty_like(self.theta)
            apply_dense(self.theta, values, lr, self._scratch)
        else:
            apply_sparse(self.theta, indices, values, lr)
        return Applied(staleness)
