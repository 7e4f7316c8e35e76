"""Amdahl / USL fits of benchmarks/usl.py on curves with known parameters."""
import math

import numpy as np
import pytest

from benchmarks.usl import amdahl, fit, fit_amdahl, fit_usl, speedups, usl

NS = [1, 2, 4, 8]


def test_laws_by_hand():
    # p = 0.5 at n = 2: 1 / (0.5 + 0.25) = 4/3
    assert amdahl(2, 0.5) == pytest.approx(4 / 3)
    # σ = 0.1, κ = 0.01 at n = 4: 4 / (1 + 0.3 + 0.12) = 2.8169…
    assert usl(4, 0.1, 0.01) == pytest.approx(4 / 1.42)
    assert usl(1, 0.3, 0.2) == 1.0 and amdahl(1, 0.7) == 1.0


def test_fit_amdahl_recovers_p():
    assert fit_amdahl(NS, amdahl(NS, 0.8)) == pytest.approx(0.8)
    assert fit_amdahl(NS, NS) == pytest.approx(1.0)          # perfectly linear
    assert fit_amdahl(NS, [1, 1, 1, 1]) == pytest.approx(0.0)


def test_fit_usl_recovers_sigma_kappa():
    sigma, kappa = fit_usl(NS, usl(NS, 0.05, 0.02))
    assert sigma == pytest.approx(0.05) and kappa == pytest.approx(0.02)


def test_fit_usl_never_negative():
    # super-linear points would need σ < 0; the fit clamps to the best non-negative pair
    sigma, kappa = fit_usl(NS, [1.0, 2.2, 4.6, 9.5])
    assert sigma >= 0 and kappa >= 0
    assert (sigma, kappa) == (0.0, 0.0)


def test_fit_from_times_and_peak():
    sigma, kappa = 0.1, 0.01
    times = {n: 100.0 / usl(n, sigma, kappa) for n in NS}
    f = fit(times)
    assert f.sigma == pytest.approx(sigma) and f.kappa == pytest.approx(kappa)
    assert f.usl_peak == pytest.approx(math.sqrt(0.9 / 0.01))
    assert f.to_dict()["usl_peak_n"] == pytest.approx(f.usl_peak)
    assert 0 < f.p < 1


def test_speedups_need_n1_and_reject_bad_points():
    assert speedups({1: 10.0, 2: 5.0}) == {1: 1.0, 2: 2.0}
    with pytest.raises(ValueError, match="n = 1"):
        speedups({2: 5.0, 4: 3.0})
    with pytest.raises(ValueError):
        fit_usl([1], [1.0])
    with pytest.raises(ValueError):
        fit_amdahl([1, 2], [1.0, 0.0])
    assert np.isfinite(fit_amdahl([1, 2], [1.0, 1.5]))
