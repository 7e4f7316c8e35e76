"""Hand-computed examples for the Spark papers' averaging math (edgebed.algorithms.averaging)."""
import numpy as np
import pytest

from edgebed.algorithms.averaging import (adaptive_exchange_due, average, divergence, diverged, dynamic_sync,
                                  easgd_exchange)


def test_average_of_three():
    got = average([np.array([1.0, 2.0]), np.array([3.0, 6.0]), np.array([5.0, 1.0])])
    np.testing.assert_allclose(got, [3.0, 3.0])


def test_average_keeps_float32_and_inputs():
    a = np.array([1.0, 0.0], dtype=np.float32)
    b = np.array([0.0, 1.0], dtype=np.float32)
    got = average([a, b])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [0.5, 0.5])
    np.testing.assert_array_equal(a, [1.0, 0.0])


def test_average_rejects_empty_and_mismatched():
    with pytest.raises(ValueError, match="no models"):
        average([])
    with pytest.raises(ValueError, match="shape"):
        average([np.zeros(2), np.zeros(3)])


def test_divergence_is_squared_distance():
    # (3-0)^2 + (4-0)^2 = 25
    assert divergence(np.array([3.0, 4.0]), np.zeros(2)) == 25.0
    assert diverged(np.array([3.0, 4.0]), np.zeros(2), delta=24.9)
    assert not diverged(np.array([3.0, 4.0]), np.zeros(2), delta=25.0)   # strictly greater


def test_dynamic_sync_quiet_round_communicates_nothing():
    ref = np.array([1.0, 1.0])
    models = [np.array([1.5, 1.0]), np.array([1.0, 0.5])]   # divergences 0.25, 0.25
    new_models, new_ref, synced = dynamic_sync(models, ref, delta=0.3)
    assert not synced
    assert new_ref is ref
    assert all(a is b for a, b in zip(new_models, models))


def test_dynamic_sync_one_violation_averages_everyone():
    ref = np.zeros(2)
    models = [np.array([2.0, 0.0]), np.array([0.0, 0.0]), np.array([1.0, 3.0])]  # 4, 0, 10
    new_models, new_ref, synced = dynamic_sync(models, ref, delta=5.0)
    assert synced
    np.testing.assert_allclose(new_ref, [1.0, 1.0])
    for m in new_models:
        np.testing.assert_allclose(m, [1.0, 1.0])
    # the workers get private copies: training one must not move the others or the reference
    new_models[0] += 1.0
    np.testing.assert_allclose(new_models[1], [1.0, 1.0])
    np.testing.assert_allclose(new_ref, [1.0, 1.0])


def test_dynamic_sync_delta_zero_is_periodic_averaging():
    ref = np.zeros(1)
    _, new_ref, synced = dynamic_sync([np.array([1e-9]), np.array([3.0])], ref, delta=0.0)
    assert synced
    np.testing.assert_allclose(new_ref, [1.5 + 5e-10])


def test_easgd_exchange_hand_example():
    # alpha = 0.25, worker - center = [4, -8] → elastic = [1, -2]
    w, c = easgd_exchange(np.array([5.0, 0.0]), np.array([1.0, 8.0]), alpha=0.25)
    np.testing.assert_allclose(w, [4.0, 2.0])
    np.testing.assert_allclose(c, [2.0, 6.0])


def test_easgd_conserves_sum_and_contracts():
    rng = np.random.default_rng(0)
    worker, center = rng.normal(size=10), rng.normal(size=10)
    w, c = easgd_exchange(worker, center, alpha=0.1)
    np.testing.assert_allclose(w + c, worker + center)
    # the gap shrinks by the factor (1 - 2α)
    np.testing.assert_allclose(w - c, 0.8 * (worker - center))


def test_easgd_rejects_bad_alpha():
    with pytest.raises(ValueError, match="alpha"):
        easgd_exchange(np.zeros(1), np.zeros(1), alpha=1.0)


def test_adaptive_period_exchanges_when_loss_passes_threshold():
    acc, due = 0.0, False
    trace = []
    for loss in [0.4, 0.4, 0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]:
        acc, due = adaptive_exchange_due(acc, loss, threshold=1.0)
        trace.append(due)
    # 0.4+0.4+0.4 = 1.2 > 1 → exchange at step 3; then 0.1 × 11 > 1 only after 11 steps → not yet
    assert trace == [False, False, True] + [False] * 8
    assert acc == pytest.approx(0.8)


def test_adaptive_period_equal_is_not_passed():
    acc, due = adaptive_exchange_due(0.5, 0.5, threshold=1.0)
    assert (acc, due) == (1.0, False)
