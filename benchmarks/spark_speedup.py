"""SparkNet's speed-up model (Moritz et al., Sec. 3), applied to measured rounds-to-accuracy.

Times are in one unit of the caller's choosing (e.g. virtual seconds): C is one minibatch step's
compute time, S one synchronisation's overhead. N_a is serial SGD's steps to accuracy a; M_a(τ) is
the rounds (synchronisations) that K workers with τ local steps each need to reach a.
"""

from __future__ import annotations


def naive_speedup(c: float, s: float, k: int) -> float:
    """Naive data parallelism (one synchronisation per step): C / (C/K + S)."""
    if c <= 0 or s < 0 or k < 1:
        raise ValueError(f"naive_speedup: need C > 0, S >= 0, K >= 1 (got C={c}, S={s}, K={k})")
    return c / (c / k + s)


def sparknet_speedup(n_a: float, c: float, s: float, rounds: dict[int, float]) -> float:
    """SparkNet: max over τ of N_a·C / ((τ·C + S)·M_a(τ)); `rounds` maps τ to measured M_a(τ)."""
    if not rounds:
        raise ValueError("sparknet_speedup: no measured M_a(τ); give at least one τ that reached a")
    if n_a <= 0 or c <= 0 or s < 0:
        raise ValueError(f"sparknet_speedup: need N_a > 0, C > 0, S >= 0 (got {n_a}, {c}, {s})")
    return max(n_a * c / ((tau * c + s) * m) for tau, m in rounds.items())
