"""Scaling laws for the speedup curve: Amdahl's law and Gunther's Universal Scalability Law (USL).

Speedup S(n) = T(1) / T(n) for n workers (T: time to the target accuracy).

- Amdahl: S(n) = 1 / ((1 − p) + p / n), p the parallel fraction (0 ≤ p ≤ 1); S never falls.
- USL:    S(n) = n / (1 + σ (n − 1) + κ n (n − 1)), σ ≥ 0 contention, κ ≥ 0 coherency (crosstalk);
  with κ > 0 the speedup peaks at n* = sqrt((1 − σ) / κ) and then falls, as a parameter server
  does once its ingress saturates.

Both fits are linear least squares after a change of variables, so only numpy is needed:
1/S − 1 = p (1/n − 1) for Amdahl, n/S − 1 = σ (n − 1) + κ n (n − 1) for USL.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np


def amdahl(n, p: float):
    """Amdahl speedup at ``n`` workers for parallel fraction ``p``."""
    n = np.asarray(n, dtype=float)
    return 1.0 / ((1.0 - p) + p / n)


def usl(n, sigma: float, kappa: float):
    """USL speedup at ``n`` workers (relative to one worker)."""
    n = np.asarray(n, dtype=float)
    return n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))


def speedups(times: Mapping[int, float]) -> dict[int, float]:
    """S(n) = T(1) / T(n) from times per worker count (needs n = 1)."""
    if 1 not in times:
        raise ValueError(f"speedups need the time at n = 1, got n = {sorted(times)}")
    return {n: times[1] / t for n, t in sorted(times.items())}


def _arrays(ns: Sequence[float], s: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(ns, dtype=float)
    y = np.asarray(s, dtype=float)
    if n.shape != y.shape or n.size < 2:
        raise ValueError("need at least two (n, speedup) points of equal count")
    if np.any(n < 1) or np.any(y <= 0):
        raise ValueError("worker counts must be ≥ 1 and speedups > 0")
    return n, y


def fit_amdahl(ns: Sequence[float], s: Sequence[float]) -> float:
    """Parallel fraction p ∈ [0, 1] that fits 1/S − 1 = p (1/n − 1) best in least squares."""
    n, y = _arrays(ns, s)
    a = 1.0 / n - 1.0
    b = 1.0 / y - 1.0
    denom = float(a @ a)
    if denom == 0.0:
        raise ValueError("Amdahl fit needs some n > 1")
    return float(np.clip((a @ b) / denom, 0.0, 1.0))


def fit_usl(ns: Sequence[float], s: Sequence[float]) -> tuple[float, float]:
    """(σ, κ) ≥ 0 that fit n/S − 1 = σ (n − 1) + κ n (n − 1) best in least squares.

    Non-negativity is enforced by refitting with one coefficient at 0 when the free fit gives it
    a negative value (the exact non-negative least squares for two unknowns)."""
    n, y = _arrays(ns, s)
    a = np.column_stack([n - 1.0, n * (n - 1.0)])
    b = n / y - 1.0
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    if np.all(coef >= 0):
        return float(coef[0]), float(coef[1])
    best = None
    for keep in (0, 1):
        col = a[:, keep]
        c = max(0.0, float(col @ b) / float(col @ col)) if col @ col > 0 else 0.0
        cand = (c, 0.0) if keep == 0 else (0.0, c)
        err = float(np.sum((a @ np.array(cand) - b) ** 2))
        if best is None or err < best[0]:
            best = (err, cand)
    return best[1]


@dataclass(frozen=True)
class ScalingFit:
    p: float            # Amdahl parallel fraction
    sigma: float        # USL contention
    kappa: float        # USL coherency

    @property
    def usl_peak(self) -> float:
        """Worker count at which the USL speedup peaks (inf when κ = 0)."""
        return math.inf if self.kappa <= 0 else math.sqrt(max(0.0, 1.0 - self.sigma) / self.kappa)

    def to_dict(self) -> dict:
        return {"amdahl_p": self.p, "usl_sigma": self.sigma, "usl_kappa": self.kappa,
                "usl_peak_n": None if math.isinf(self.usl_peak) else self.usl_peak}


def fit(times: Mapping[int, float]) -> ScalingFit:
    """Both fits from times per worker count."""
    s = speedups(times)
    ns, ys = list(s), list(s.values())
    sigma, kappa = fit_usl(ns, ys)
    return ScalingFit(fit_amdahl(ns, ys), sigma, kappa)
