"""Running statistics under the same trust as the weights (issue 51, 1): under ``model.buffers: average``
a push that would drive a running variance below zero, or move a statistic by 10³⁰, is refused
(``bad-payload``), Θ untouched; an honest delta (a variance grown 5,000-fold, the model's own local
statistics) still goes through. Before, only finiteness was checked: both attacks were applied and
every evaluation after them scored 0.099 with loss NaN (or 2.31)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgebed import wire
from edgebed.models import get_flat, layers_of
from edgebed.ps.evaluator import evaluate
from edgebed.ps.rules import RULES
from edgebed.ps.server import Hooks, ParameterServer, PSConfig


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 28 * 28, 10))


def _ps(rule: str = "model-averaging"):
    model = _net()
    theta, layers = get_flat(model, buffers=True), layers_of(model, buffers=True)
    stats = sum(L.size for L in layers if L.kind == "buffer")
    var = next(L for L in layers if L.name.endswith("running_var"))
    config = PSConfig(n_devices=2, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                      class_of=lambda d: "c", statistics=stats, variances=((var.offset, var.size),))
    ps = ParameterServer(config, theta, RULES[rule](theta, 0.05), Hooks())
    return ps, model, var


def _call(ps, msg):
    out = ps.process(b"peer", [bytes(memoryview(f)) if not isinstance(f, np.ndarray) else f.tobytes()
                               for f in wire.encode(msg)])
    return wire.decode(out) if out else None


def _join(ps) -> str:
    s = _call(ps, wire.Hello(0, "c", 0)).session
    assert isinstance(_call(ps, wire.Pull(s)), wire.Model)
    return s


def _loss(ps, model) -> float:
    x = torch.randn(64, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(2))
    model.eval()
    _, loss = evaluate(model, ps.theta, x, y, buffers=True)
    return loss


@pytest.mark.parametrize("rule", ["model-averaging", "easgd"])
def test_a_push_that_makes_a_running_variance_negative_is_refused(rule):
    ps, model, var = _ps(rule)
    s = _join(ps)
    before = ps.theta.copy()
    delta = np.zeros_like(ps.theta)
    delta[var.offset:var.offset + var.size] = -37.0 - ps.theta[var.offset:var.offset + var.size]   # var → −37
    reply = _call(ps, wire.Push(s, 0, ps.version, delta, None, 0.5))
    assert isinstance(reply, wire.Error) and reply.code == "bad-payload", reply
    assert "running variance" in reply.message and "below zero" in reply.message, reply.message
    np.testing.assert_array_equal(ps.theta, before)
    assert ps.errors == {"bad-payload": 1}
    assert np.isfinite(_loss(ps, model))


def test_a_sparse_push_into_the_variances_is_refused_too():
    ps, _, var = _ps("easgd")
    s = _join(ps)
    idx = np.array([0, var.offset + 1], np.uint32)
    reply = _call(ps, wire.Push(s, 0, ps.version, np.array([0.01, -5.0], np.float32), idx, 0.5))
    assert isinstance(reply, wire.Error) and "below zero" in reply.message, reply
    ok = _call(ps, wire.Push(s, 1, ps.version, np.array([0.01, -0.5], np.float32), idx, 0.5))
    assert isinstance(ok, wire.Ack) and ok.applied
    assert ps.theta[var.offset + 1] == np.float32(0.5)


@pytest.mark.parametrize("which", ["running_mean", "running_var"])
def test_a_finite_delta_of_1e30_on_a_statistic_is_refused(which):
    ps, model, var = _ps("easgd")
    s = _join(ps)
    layers = layers_of(model, buffers=True)
    L = next(L for L in layers if L.name.endswith(which))
    delta = np.zeros_like(ps.theta)
    delta[L.offset:L.offset + L.size] = 1e30
    before = ps.theta.copy()
    reply = _call(ps, wire.Push(s, 0, ps.version, delta, None, 0.5))
    assert isinstance(reply, wire.Error) and reply.code == "bad-payload", reply
    assert "running statistic" in reply.message and "1e" not in reply.message, reply.message
    np.testing.assert_array_equal(ps.theta, before)


def test_honest_statistics_go_through_and_variances_stay_non_negative():
    """Deltas x − Θ from local statistics x ≥ 0 (model averaging's very deltas, here down to 0 and up
    5,000-fold) are all applied, and no running variance is ever below zero after a round."""
    ps, model, var = _ps("model-averaging")
    s = _join(ps)
    rng = np.random.default_rng(0)
    sl = slice(var.offset, var.offset + var.size)
    for i, target in enumerate([0.0, 5000.0, 1e-7, 3.0]):
        local = ps.theta.copy()
        local[sl] = np.float32(target) * rng.random(var.size, dtype=np.float32)
        reply = _call(ps, wire.Push(s, i, ps.version, local - ps.theta, None, 0.5))
        assert isinstance(reply, wire.Ack) and reply.applied, reply
        assert (ps.theta[sl] >= 0).all(), ps.theta[sl]
        _call(ps, wire.Pull(s))
    assert ps.errors == {}
