"""topk_indices is a function of the values alone: the k largest |x|, a NaN above every number, the
lowest positions first among equal ranks — on arrays with zeros, ties, NaN, ±inf and -0.0. The
definition below (a stable sort by rank) is slow but obviously host-independent; the fast path must
give exactly its answer."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from edgebed.compression import topk_indices


def by_rank(x: np.ndarray, k: int) -> np.ndarray:
    """The definition: positions sorted by (NaN first, |x| descending, position ascending), the first
    k of them, ascending."""
    n = x.size
    k = max(1, min(int(k), n))
    a = np.abs(x.astype(np.float64))
    nan = np.isnan(a)
    order = np.lexsort((np.arange(n), -np.where(nan, 0.0, a), ~nan))   # last key sorts first
    return np.sort(order[:k]).astype(np.uint32)


@pytest.mark.parametrize("zeros", [0.0, 0.3, 0.6, 0.9, 0.99, 0.9995])
def test_a_relu_like_gradient_with_many_zeros(zeros):
    rng = np.random.default_rng(7)
    g = rng.standard_normal(200_704).astype(np.float32)
    g[rng.random(g.size) < zeros] = 0
    for k in (1, 21, 2008, 20_000):
        got = topk_indices(g, k)
        assert got.dtype == np.uint32
        assert np.array_equal(got, by_rank(g, k))


def test_ties_at_the_threshold_keep_the_lowest_positions():
    x = np.array([0, 2, 1, 2, 0, 2, -2, 3], dtype=np.float32)
    assert topk_indices(x, 3).tolist() == [1, 3, 7]          # 3, then the first two of four 2s
    assert topk_indices(np.zeros(6, np.float32), 2).tolist() == [0, 1]
    assert topk_indices(np.array([0, 1, 0, 0], np.float32), 3).tolist() == [0, 1, 2]
    nan = np.array([1, np.nan, np.inf, np.nan, 5], dtype=np.float32)
    assert topk_indices(nan, 1).tolist() == [1]               # NaN ranks above +inf
    assert topk_indices(nan, 3).tolist() == [1, 2, 3]


values = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.nan, np.inf, -np.inf, 1e-30, -3.0])
@settings(max_examples=500, deadline=None)
@given(x=arrays(np.float32, st.integers(1, 60), elements=st.one_of(values, st.floats(-4, 4, width=32))),
       k=st.integers(0, 70))
def test_same_pick_as_the_definition_with_ties_nans_and_zeros(x, k):
    assert np.array_equal(topk_indices(x, k), by_rank(x, k))
