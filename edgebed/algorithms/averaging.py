"""Model-averaging math of the Spark papers: periodic and dynamic averaging, elastic averaging (EASGD).

Pure numpy on flat parameter vectors; the update-rule classes decide *when* to call these.

- SparkNet (Moritz et al. 2016): every worker runs τ local steps, then ``average`` of all models is
  broadcast back.
- Dynamic averaging (Kamp et al. 2018; Alkhoury et al. on Spark): a worker only asks for a
  synchronisation when its model left the safe zone around the last common model, ``diverged``;
  ``dynamic_sync`` averages only then, so quiet phases cost no traffic.
- Elastic averaging SGD (Zhang et al. 2015) as used asynchronously by DeepSpark (Kim et al. 2016):
  worker and center variable move toward each other by the moving rate α, ``easgd_exchange``; DeepSpark
  exchanges when the loss a worker accumulated since its last exchange passes a threshold,
  ``adaptive_exchange_due``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def average(models: Sequence[np.ndarray]) -> np.ndarray:
    """Element-wise mean of equally shaped parameter vectors (a new array; inputs untouched)."""
    if len(models) == 0:
        raise ValueError("average of no models")
    shape = models[0].shape
    for m in models:
        if m.shape != shape:
            raise ValueError(f"models differ in shape: {shape} vs {m.shape}")
    # Accumulate in float64 so the mean of many float32 models does not drift with their order.
    total = np.zeros(shape, dtype=np.float64)
    for m in models:
        total += m
    return (total / len(models)).astype(np.result_type(*models), copy=False)


def divergence(local: np.ndarray, reference: np.ndarray) -> float:
    """Squared Euclidean distance ‖local − reference‖² (Kamp et al.'s local condition).

    Summed by numpy's own pairwise reduction (``np.sum``), not ``np.dot``: a dot product goes through
    OpenBLAS, whose kernel (and so its order of additions, and the last bits that decide a sync) is
    chosen by the host's CPU — measured: SkylakeX and Haswell kernels give different bits. numpy's
    pairwise sum has one order of additions on every SIMD level (checked by
    ``tests/unit/test_numerics.py``)."""
    d = (np.asarray(local, dtype=np.float64) - np.asarray(reference, dtype=np.float64)).ravel()
    return float(np.sum(d * d))


def diverged(local: np.ndarray, reference: np.ndarray, delta: float) -> bool:
    """True when ‖local − reference‖² > δ: the worker has left its safe zone and must report."""
    return divergence(local, reference) > delta


def dynamic_sync(models: Sequence[np.ndarray], reference: np.ndarray,
                 delta: float) -> tuple[list[np.ndarray], np.ndarray, bool]:
    """One dynamic-averaging check after a round.

    If any worker's ‖model − reference‖² exceeds δ, all models are replaced by their average, which
    also becomes the new reference (a full synchronisation; Kamp et al.'s partial balancing over a
    subset of workers is a refinement on top). Otherwise nothing is communicated and models and
    reference are returned unchanged. Returns ``(new_models, new_reference, synced)``.
    """
    if delta < 0:
        raise ValueError(f"delta must be ≥ 0, got {delta}")
    if not any(diverged(m, reference, delta) for m in models):
        return list(models), reference, False
    avg = average(models)
    return [avg.copy() for _ in models], avg, True


def easgd_exchange(worker: np.ndarray, center: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Elastic exchange with moving rate α ∈ (0, 1): returns ``(new_worker, new_center)``.

    With e = α (worker − center): worker ← worker − e, center ← center + e. Both are computed from
    the values *before* the exchange, so the sum worker + center is conserved."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"moving rate alpha must be in (0, 1), got {alpha}")
    elastic = alpha * (worker - center)
    return worker - elastic, center + elastic


def adaptive_exchange_due(accumulated_loss: float, loss: float, threshold: float) -> tuple[float, bool]:
    """DeepSpark's adaptive communication period, one local step at a time.

    Adds this step's training ``loss`` to the loss accumulated since the last exchange. When the sum
    passes ``threshold`` (strictly greater) an exchange is due and the accumulator restarts at 0.
    Returns ``(new_accumulated_loss, exchange_due)``. A worker whose loss is high (far from the
    center) thus exchanges often; one that has converged exchanges rarely."""
    if threshold <= 0:
        raise ValueError(f"threshold must be > 0, got {threshold}")
    acc = accumulated_loss + loss
    if acc > threshold:
        return 0.0, True
    return acc, False


# -- streaming forms used by the PS's averaging rules: one delta at a time, O(|Θ|) memory ----------

def add_delta(total: np.ndarray, values: np.ndarray, indices=None) -> None:
    """total ← total + Δ in place; Δ dense (``indices`` None) or sparse (uint32 positions, unique).
    Sums deltas (the averaging rules) and moves EASGD's center: center + α(worker − center)."""
    if indices is None:
        total += values
    else:
        total[indices] += values


def apply_mean(theta: np.ndarray, total: np.ndarray, count: int) -> None:
    """Θ ← Θ + total/count in place: with total = Σ (xᵢ − Θ) over count workers this sets Θ to the
    average of their models, ``average([x₁..x_count])``, without holding count models at once."""
    if count <= 0:
        raise ValueError(f"mean of {count} deltas")
    theta += (total / count).astype(theta.dtype, copy=False)

