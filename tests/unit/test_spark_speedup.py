"""SparkNet's speed-up model on small synthetic inputs."""

import pytest

from benchmarks.spark_speedup import naive_speedup, sparknet_speedup

pytestmark = pytest.mark.timeout(60)


def test_naive_speedup_is_k_without_overhead_and_vanishes_as_overhead_grows() -> None:
    assert naive_speedup(2.0, 0.0, 5) == pytest.approx(5.0)
    assert naive_speedup(2.0, 200.0, 5) < 0.01


def test_sparknet_picks_the_best_tau_and_keeps_a_speedup_where_naive_has_none() -> None:
    # N_a = 1000 serial steps; τ = 1 needs 250 rounds, τ = 50 needs 10 rounds (500 steps per worker).
    rounds = {1: 250.0, 50: 10.0}
    assert sparknet_speedup(1000, 1.0, 0.0, rounds) == pytest.approx(4.0)  # τ = 1 wins at S = 0
    at_100c = sparknet_speedup(1000, 1.0, 100.0, rounds)
    assert at_100c == pytest.approx(1000 / (150 * 10))  # τ = 50 wins at S = 100·C
    assert at_100c > 10 * naive_speedup(1.0, 100.0, 5)


def test_sparknet_without_measurements_says_what_to_do() -> None:
    with pytest.raises(ValueError, match="at least one"):
        sparknet_speedup(1000, 1.0, 0.0, {})
