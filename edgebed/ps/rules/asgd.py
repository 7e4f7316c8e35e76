"""ASGD: Θ ← Θ − (α/τ)·g with τ the global staleness of the update (α when τ = 0)."""
from __future__ import annotations

from ..aggregate import apply_dense, apply_sparse, staleness_lr
from .base import Applied, UpdateRule


class ASGD(UpdateRule):
    name = "asgd"
    compressor = "dense"

    def apply(self, device, staleness, values, indices):
        lr = float(staleness_lr(self.lr, staleness))
        if indices is None:
            apply_dense(self.theta, values, lr)
        else:
            apply_sparse(self.theta, indices, values, lr)
        return Applied(staleness)
