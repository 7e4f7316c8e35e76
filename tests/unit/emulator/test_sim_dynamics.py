"""The virtual clock's dynamics building blocks: duration draws with the configured means, the diurnal
factor, the PS link's FIFO queue (delays, utilisation per window)."""
from __future__ import annotations

import numpy as np
import pytest

from edgebed.dynamics import Diurnal, DurationDist
from edgebed.emulator.runtimes.sim_dynamics import _Fifo, diurnal_factor, draw


@pytest.mark.parametrize("spec", [{"dist": "exponential", "mean": "4s"}, {"dist": "lognormal", "mean": "4s", "sigma": 0.7},
                                  {"dist": "uniform", "mean": "4s", "spread": "3s"}, "4s"])
def test_draws_have_the_configured_mean(spec):
    dist = DurationDist.model_validate(spec)
    rng = np.random.default_rng(0)
    x = np.array([draw(dist, rng) for _ in range(20000)])
    assert x.min() >= 0 and x.mean() == pytest.approx(4.0, rel=0.03)
    assert np.mean([draw(dist, rng, 2.0) for _ in range(20000)]) == pytest.approx(8.0, rel=0.03)


def test_diurnal_factor_is_lowest_at_the_peak():
    d = Diurnal(period="24h", amplitude=0.5, peak="14h")
    assert diurnal_factor(d, 14 * 3600) == pytest.approx(0.5)
    assert diurnal_factor(d, 2 * 3600) == pytest.approx(1.5)
    assert diurnal_factor(None, 123.0) == 1.0


def test_fifo_queues_messages_behind_each_other_and_counts_busy_time_per_window():
    f = _Fifo(8e6)                      # 1 MB/s
    assert f.serve(0.0, 500_000) == pytest.approx(0.5)
    assert f.serve(0.1, 500_000) == pytest.approx(1.0)   # waited 0.4 s behind the first
    assert f.serve(1.5, 250_000) == pytest.approx(1.75)
    w = f.window(0.0, 1.0)
    assert w["utilisation"] == pytest.approx(1.0) and w["messages"] == 3
    assert w["queue_mean_s"] == pytest.approx(0.4 / 3) and w["queue_max_s"] == pytest.approx(0.4)
    assert f.window(1.0, 2.0)["utilisation"] == pytest.approx(0.25)
    assert _Fifo(None).serve(3.0, 10**9) == 3.0        # unshared: no queue
