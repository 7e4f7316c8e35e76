"""topk_indices: the zero-heavy fast path returns exactly what argpartition picks (so the virtual
clock's recorded runs stay bit-identical), on arrays with zeros, ties, NaN and -0.0."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from edgebed.compression import topk_indices


def argpartition_pick(x: np.ndarray, k: int) -> np.ndarray:
    """The definition: argpartition's k largest |x|, sorted ascending (what topk_indices was)."""
    n = x.size
    k = max(1, min(int(k), n))
    idx = np.argpartition(np.abs(x), n - k)[n - k:]
    idx.sort()
    return idx.astype(np.uint32)


@pytest.mark.parametrize("zeros", [0.0, 0.3, 0.6, 0.9, 0.99, 0.9995])
def test_a_relu_like_gradient_with_many_zeros(zeros):
    rng = np.random.default_rng(7)
    g = rng.standard_normal(200_704).astype(np.float32)
    g[rng.random(g.size) < zeros] = 0
    for k in (1, 21, 2008, 20_000):
        got = topk_indices(g, k)
        assert got.dtype == np.uint32
        assert np.array_equal(got, argpartition_pick(g, k))


values = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, np.nan, 1e-30, -3.0])
@settings(max_examples=400, deadline=None)
@given(x=arrays(np.float32, st.integers(1, 60), elements=st.one_of(values, st.floats(-4, 4, width=32))),
       k=st.integers(1, 70))
def test_same_pick_as_argpartition_with_ties_nans_and_zeros(x, k):
    assert np.array_equal(topk_indices(x, k), argpartition_pick(x, k))
