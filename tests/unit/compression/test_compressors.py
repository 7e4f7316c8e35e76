"""Compressors: selection, error feedback's residual bookkeeping, DGC momentum, q8 quantization."""
import numpy as np
import pytest

from edgebed.compression import ErrorFeedback, Quantize8, TopC, TopCPerLayer, make_compressor
from edgebed.compression import ops
from edgebed.models import Layer

LAYERS = [Layer("w", 0, 60, (6, 10)), Layer("b", 60, 6, (6,)), Layer("w2", 66, 34, (34,))]


def grad(seed, n=100):
    return np.random.default_rng(seed).normal(0, 1, n).astype(np.float32)


def test_error_feedback_sends_everything_eventually_and_keeps_the_rest():
    ef = ErrorFeedback(TopC(0.1))
    total_g = np.zeros(100, np.float32)
    total_sent = np.zeros(100, np.float32)
    for s in range(30):
        g = grad(s)
        total_g += g
        out = ef.compress(g)
        assert out.entries == 10
        total_sent[out.indices] += out.values
        # bookkeeping: everything computed = everything sent + the residual, at every step
        np.testing.assert_allclose(total_sent + ef.residual, total_g, atol=1e-4)
        assert np.all(ef.residual[out.indices] == 0)   # what was sent leaves the residual
    # no entry starves: every coordinate was sent at least once in 30 pushes of 10 %
    assert np.count_nonzero(total_sent) == 100


def test_error_feedback_first_push_equals_plain_top_c():
    g = grad(1)
    a, b = ErrorFeedback(TopCPerLayer(0.1, LAYERS)).compress(g), TopCPerLayer(0.1, LAYERS).compress(g)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.values, b.values)


def test_momentum_correction_accumulates_velocity_and_masks_it_where_sent():
    m = 0.9
    ef = ErrorFeedback(TopC(0.05), momentum=m)
    u = np.zeros(100, np.float32)
    v = np.zeros(100, np.float32)
    for s in range(5):
        g = grad(s)
        u = m * u + g                       # DGC: u ← m·u + g; v ← v + u
        v = v + u
        out = ef.compress(g)
        expect = ops.top_c(v, 0.05)
        np.testing.assert_array_equal(out.indices, expect)
        np.testing.assert_allclose(out.values, v[expect], rtol=1e-5)
        v[expect] = 0                       # sent, and momentum factor masking
        u[expect] = 0
        np.testing.assert_allclose(ef.residual, v, atol=1e-5)
        np.testing.assert_allclose(ef.velocity, u, atol=1e-5)


def test_reset_drops_the_residual():
    ef = ErrorFeedback(TopC(0.1))
    ef.compress(grad(0))
    ef.reset()
    out = ef.compress(grad(1))
    np.testing.assert_array_equal(out.values, TopC(0.1).compress(grad(1)).values)


def test_q8_is_unbiased_and_bounded_per_layer():
    g = grad(3)
    g[60:66] *= 100   # a layer with a very different scale keeps its own scale
    q = Quantize8(TopCPerLayer(1.0, LAYERS), LAYERS, np.random.default_rng(0))
    outs = np.stack([q.compress(g).values for _ in range(2000)])
    codes, scales, counts = q.compress(g).q8
    assert codes.dtype == np.int8 and np.abs(codes.astype(int)).max() <= 127
    np.testing.assert_array_equal(counts, [60, 6, 34])
    np.testing.assert_allclose(scales[1], np.abs(g[60:66]).max() / 127, rtol=1e-6)
    err = np.abs(outs - g)   # each value within one quantization step of its layer
    step = np.repeat(scales, counts)
    assert np.all(err <= step * 1.0001)
    np.testing.assert_allclose(outs.mean(0), g, atol=float(step.max()) * 0.1)   # unbiased


def test_q8_of_sparse_counts_entries_per_layer_and_values_match_codes():
    q = Quantize8(TopCPerLayer(0.1, LAYERS), LAYERS, np.random.default_rng(1))
    s = q.compress(grad(5))
    codes, scales, counts = s.q8
    np.testing.assert_array_equal(counts, [6, 1, 4])
    np.testing.assert_array_equal(s.values, ops.dequantize_q8(codes, scales, counts))


def test_error_feedback_over_q8_feeds_back_the_quantization_error():
    ef = make_compressor("dense", 1.0, LAYERS, error_feedback=True, quantize="q8", rng=np.random.default_rng(2))
    g = grad(7)
    out = ef.compress(g)
    np.testing.assert_allclose(out.values + ef.residual, g, atol=1e-6)


def test_make_compressor_refuses_what_it_cannot_build():
    with pytest.raises(ValueError, match="momentum correction needs error_feedback"):
        make_compressor("top-c", 0.1, LAYERS, momentum=0.9)
    with pytest.raises(ValueError, match="unknown compressor"):
        make_compressor("top-k", 0.1, LAYERS)
