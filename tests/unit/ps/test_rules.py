"""Update rules against hand-computed examples, and the PS's staleness bookkeeping."""
import numpy as np

from edgebed.compression import TopC, TopCPerLayer, keep_count, topk_indices
from edgebed.models import Layer
from edgebed.ps.rules import RULES, AdaComp, ASGD, CompASGD

A = 0.1
u32 = lambda *x: np.array(x, dtype=np.uint32)  # noqa: E731
f32 = lambda *x: np.array(x, dtype=np.float32)  # noqa: E731


def test_asgd_divides_lr_by_global_staleness():
    theta = np.zeros(3, np.float32)
    r = ASGD(theta, A)
    r.apply(0, 0, f32(1, 2, 3), None)          # τ = 0 → α
    np.testing.assert_allclose(theta, [-0.1, -0.2, -0.3], rtol=1e-6)
    r.apply(1, 4, f32(4, 4, 4), None)          # τ = 4 → α/4
    np.testing.assert_allclose(theta, [-0.2, -0.3, -0.4], rtol=1e-6)
    assert r.apply(2, 1, f32(0, 0, 0), None).staleness == 1


def test_comp_asgd_applies_sparse_with_global_staleness():
    theta = np.ones(5, np.float32)
    r = CompASGD(theta, A)
    r.apply(0, 2, f32(2, -4), u32(1, 3))       # α/2 on entries 1 and 3 only
    np.testing.assert_allclose(theta, [1, 0.9, 1, 1.2, 1], rtol=1e-6)
    assert CompASGD.compressor == "top-c" and AdaComp.compressor == "top-c-per-layer"


def test_adacomp_paper_fig2_style_staleness():
    """Three workers pull Θ (4 parameters) at version 0, then push interleaved:
    B sends {0,1}, then C sends {1,2}, then A sends {0,1,3}. Per-parameter staleness counts only
    the updates that touched that parameter since the worker's pull:
      B: σ = (0, 0)        τ = 0
      C: σ_1 = 1 (B), σ_2 = 0            τ = 1
      A: σ_0 = 1 (B), σ_1 = 2 (B, C), σ_3 = 0   τ = 2
    α_k = α/σ_k, and α when σ_k = 0."""
    theta = np.zeros(4, np.float32)
    r = AdaComp(theta, A)
    for dev in "ABC":
        r.on_pull(ord(dev), 0)
    b = r.apply(ord("B"), 0, f32(1, 1), u32(0, 1))
    c = r.apply(ord("C"), 1, f32(1, 1), u32(1, 2))
    a = r.apply(ord("A"), 2, f32(1, 1, 1), u32(0, 1, 3))
    assert (b.sigma_mean, b.sigma_max) == (0, 0)
    assert (c.sigma_mean, c.sigma_max) == (0.5, 1)
    assert (a.sigma_mean, a.sigma_max) == (1, 2)
    # Θ_0: B α + A α/1;  Θ_1: B α + C α/1 + A α/2;  Θ_2: C α;  Θ_3: A α
    np.testing.assert_allclose(theta, [-0.2, -0.25, -0.1, -0.1], rtol=1e-6)
    # A pulls again: its σ restart from zero. B did not pull again, so Θ_1 has since been updated
    # by B itself, C, A and A again: σ_1 = 4.
    r.on_pull(ord("A"), 3)
    assert r.apply(ord("A"), 0, f32(0), u32(1)).sigma_max == 0
    assert r.apply(ord("B"), 4, f32(0), u32(1)).sigma_max == 4


def test_adacomp_bookkeeping_cost_does_not_depend_on_history():
    theta = np.zeros(1000, np.float32)
    r = AdaComp(theta, A)
    for d in range(50):
        r.on_pull(d, 0)
    for d in range(50):
        r.apply(d, d, f32(1), u32(7))
    assert r.counts[7] == 50 and r.counts.sum() == 50
    r.forget(3)
    assert 3 not in r.pulls
    state = r.state_dict()
    r2 = AdaComp(np.zeros(1000, np.float32), A)
    r2.load_state_dict(state)
    assert r2.counts[7] == 50


def test_registry_keys():
    assert set(RULES) >= {"asgd", "comp-asgd", "adacomp"}


def test_topk_keeps_largest_magnitudes_sorted():
    x = f32(0.1, -5, 3, 0, -0.2, 4)
    np.testing.assert_array_equal(topk_indices(x, 3), [1, 2, 5])
    assert keep_count(211_690, 0.01) == 2117


def test_top_c_per_layer_keeps_c_of_each_layer():
    layers = [Layer("w", 0, 100, (100,)), Layer("b", 100, 10, (10,))]
    g = np.random.default_rng(0).normal(size=110).astype(np.float32)
    g[100:] *= 1e-3   # a global top-c would never pick the small-magnitude bias
    s = TopCPerLayer(0.1, layers).compress(g)
    assert s.entries == 10 + 1 and (s.indices >= 100).sum() == 1
    assert (TopC(0.1).compress(g).indices < 100).all()
    np.testing.assert_array_equal(s.values, g[s.indices])


def test_cnn_compression_sizes():
    from edgebed.models import build_model, layers_of
    layers = layers_of(build_model("cnn"))
    g = np.random.default_rng(1).normal(size=211_690).astype(np.float32)
    assert TopCPerLayer(0.01, layers).compress(g).entries == sum(keep_count(l.size, 0.01) for l in layers)
    assert TopC(0.01).compress(g).entries == 2117
