"""Pure numpy math of the update rules: learning rates from staleness and in-place applies."""
from __future__ import annotations

import numpy as np


def staleness_lr(alpha: float, staleness):
    """α/τ, and α when τ = 0 (ASGD, Comp-ASGD with global τ; AdaComp with per-parameter σ_k).

    ``staleness`` may be an int or an integer array; the result has the same shape."""
    return alpha / np.maximum(staleness, 1)


def apply_dense(theta: np.ndarray, grad: np.ndarray, lr: float) -> None:
    """Θ ← Θ − lr·g, in place."""
    theta -= np.float32(lr) * grad


def apply_sparse(theta: np.ndarray, indices: np.ndarray, values: np.ndarray, lr) -> None:
    """Θ[k] ← Θ[k] − lr_k·v_k for each sent k (indices unique), in place; lr scalar or per entry."""
    theta[indices] -= (np.asarray(lr, dtype=np.float32) * values).astype(np.float32, copy=False)


def per_param_staleness(counts: np.ndarray, snapshot: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """σ_k = updates applied to Θ_k since the pull = count[k] now − count[k] at the pull.

    O(len(indices)) whatever the number of workers (no history scan)."""
    return (counts[indices] - snapshot[indices]).astype(np.int64)
