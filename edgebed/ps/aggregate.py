"""Pure numpy math of the update rules: learning rates from staleness and in-place applies."""
from __future__ import annotations

import numpy as np


def staleness_lr(alpha: float, staleness):
    """α/τ, and α when τ = 0 (ASGD, Comp-ASGD with global τ; AdaComp with per-parameter σ_k).

    ``staleness`` may be an int or an integer array; the result has the same shape (arrays: float32)."""
    if isinstance(staleness, np.ndarray):   # in float64, then rounded once: the same bits as every earlier run
        return (alpha / np.maximum(staleness, 1)).astype(np.float32)
    return alpha / max(staleness, 1)


def apply_dense(theta: np.ndarray, grad: np.ndarray, lr: float, scratch: np.ndarray | None = None) -> None:
    """Θ ← Θ − lr·g, in place. ``scratch`` (float32, Θ's size) avoids allocating |Θ| floats per call."""
    if scratch is None:
        theta -= np.float32(lr) * grad
    else:
        np.multiply(grad, np.float32(lr), out=scratch)
        theta -= scratch


def as_index(indices: np.ndarray) -> np.ndarray:
    """uint32 wire indices → intp once: numpy converts on every fancy index otherwise (2× slower)."""
    return indices.astype(np.intp)


def apply_sparse(theta: np.ndarray, indices: np.ndarray, values: np.ndarray, lr) -> None:
    """Θ[k] ← Θ[k] − lr_k·v_k for each sent k (indices unique), in place; lr scalar or per entry.

    ``np.subtract.at`` with intp indices and a step of Θ's very dtype: one float32 subtraction per
    entry, the same bits as ``Θ[ix] -= step``, in 3.4 instead of 5.7 µs for 2,122 entries (numpy 2.4).
    With any other dtype — even ``<f4``, which equals the native float32 but is spelled apart —
    numpy takes a slow path (68 µs; the 285 µs measured here once), so the step is made exact first."""
    step = values * lr if isinstance(lr, np.ndarray) else values * np.float32(lr)
    ix = indices if indices.dtype == np.intp else as_index(indices)
    step = step.astype(theta.dtype, copy=False)
    if step.dtype is not theta.dtype:   # equal, spelled apart ('<f4' vs '=f4'): same bytes, Θ's dtype
        step = step.view(theta.dtype)
    np.subtract.at(theta, ix, step)


def count_updates(counts: np.ndarray, indices: np.ndarray) -> None:
    """counts[k] += 1 for each sent k (intp indices, unique), in place. ``np.add.at`` with a one of
    counts' own dtype: 4 instead of 7 µs for 2,122 entries; a Python int 1 would cost 120 µs."""
    np.add.at(counts, indices if indices.dtype == np.intp else as_index(indices), counts.dtype.type(1))


def per_param_staleness(counts: np.ndarray, snapshot: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """σ_k = updates applied to Θ_k since the pull = count[k] now − count[k] at the pull.

    O(len(indices)) whatever the number of workers (no history scan)."""
    return (counts.take(indices) - snapshot.take(indices)).astype(np.int64)
