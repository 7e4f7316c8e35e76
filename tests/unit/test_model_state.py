"""Non-gradient state in the parameter layout: running statistics as ``buffer`` layers, the policies'
rules, the refusal of state no policy carries, and batched gradients of a BatchNorm model."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch import nn

from edgebed.models import (get_flat, layers_of, recompute_statistics, set_flat, state_problems,
                            workload_state_problems)
from edgebed.scenario import Scenario
from edgebed.workload import Workload

pytestmark = pytest.mark.timeout(60)


def bn_net():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(4),
                         nn.Flatten(), nn.Linear(4 * 7 * 7, 10))


class Ema(nn.Module):
    """Keeps a moving average of its outputs in a buffer: state no policy knows how to carry."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)
        self.register_buffer("avg", torch.zeros(10))
        self.register_buffer("table", torch.arange(10))   # constant: harmless

    def forward(self, x):
        y = self.fc(torch.flatten(x, 1))
        self.avg.mul_(0.9).add_(0.1 * y.mean(0).detach())
        return y


def test_statistics_follow_the_weights_in_the_layout_and_round_trip():
    model = bn_net()
    plain = layers_of(model)
    full = layers_of(model, buffers=True)
    assert [l.kind for l in plain] == ["param"] * len(plain)               # Θ of the gradient rules: unchanged
    assert full[:len(plain)] == plain
    assert [(l.name, l.kind, l.size) for l in full[len(plain):]] == [
        ("1.running_mean", "buffer", 4), ("1.running_var", "buffer", 4)]  # num_batches_tracked never
    theta = get_flat(model, buffers=True)
    theta[-4:] = 3.0
    set_flat(model, theta, buffers=True)
    assert torch.equal(model[1].running_var, torch.full((4,), 3.0))
    set_flat(model, get_flat(model))                                       # weights only: statistics kept
    assert torch.equal(model[1].running_var, torch.full((4,), 3.0))


def test_recompute_gives_what_torch_update_bn_gives():
    torch.manual_seed(0)
    model, ref = bn_net(), bn_net()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(300, 1, 28, 28) * 2 + 1
    recompute_statistics(model, x)
    torch.optim.swa_utils.update_bn([x[i:i + 100] for i in range(0, 300, 100)], ref)
    assert not model.training and model[1].momentum == 0.1
    torch.testing.assert_close(model[1].running_mean, ref[1].running_mean)
    torch.testing.assert_close(model[1].running_var, ref[1].running_var)


def test_a_buffer_a_training_step_changes_is_refused_with_what_to_do():
    problems = workload_state_problems(Workload("ema", Ema), (1, 28, 28))
    assert len(problems) == 1
    assert problems[0].startswith("model.name: buffer 'avg' (float32) changes in a training step")
    assert "make it an nn.Parameter" in problems[0]
    assert workload_state_problems(Workload("bn", bn_net), (1, 28, 28)) == []
    assert state_problems(bn_net(), torch.zeros(2, 1, 28, 28)) == []


def _sc(algorithm: str, **model) -> Scenario:
    return Scenario.model_validate({"name": "s", "algorithm": {"name": algorithm}, "workers": {"n": 2}, "stop": {"updates": 10},
                                    "model": {"name": "cnn", **model}})


def test_auto_recomputes_for_gradient_rules_and_averages_for_averaging_rules():
    assert _sc("adacomp").buffer_policy() == "recompute"
    assert _sc("easgd").buffer_policy() == "average"
    assert _sc("model-averaging", buffers="local").buffer_policy() == "local"
    assert _sc("model-averaging").statistics_in_theta() == 0              # the CNN has none: Θ as before
    with pytest.raises(ValidationError, match="model.buffers: average needs an averaging rule"):
        _sc("asgd", buffers="average")


def test_batched_gradients_of_a_batchnorm_model_equal_one_at_a_time():
    from edgebed.device_agent.batched import BatchedGradient
    from edgebed.workload import WORKLOADS
    WORKLOADS["_bn-test"] = Workload("_bn-test", bn_net)
    try:
        batched = BatchedGradient("_bn-test", seed=1)
        single = bn_net()
        rng = np.random.default_rng(0)
        thetas = [get_flat(single) + rng.normal(0, 0.01, get_flat(single).size).astype(np.float32) for _ in range(3)]
        xs = [torch.randn(8, 1, 28, 28) for _ in range(3)]
        ys = [torch.randint(0, 10, (8,)) for _ in range(3)]
        grads, losses = batched(thetas, xs, ys)
        for theta, x, y, g, loss in zip(thetas, xs, ys, grads, losses):
            set_flat(single, theta)
            single.zero_grad()
            out = nn.functional.cross_entropy(single(x), y)
            out.backward()
            want = torch.cat([p.grad.reshape(-1) for p in single.parameters()]).numpy()
            np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
            assert abs(loss - float(out.detach())) < 1e-5
    finally:
        del WORKLOADS["_bn-test"]


def test_the_ps_bounds_the_weights_of_a_push_and_counts_its_statistics_apart():
    """Θ carrying running statistics (model.buffers average): a variance far above the weights' scale
    is neither refused as poison nor taken for divergence; a NaN in it still is; its bytes are shown
    apart from the push's."""
    from edgebed import wire
    from edgebed.ps.rules.easgd import EASGD
    from edgebed.ps.server import Hooks, ParameterServer, PSConfig
    theta = np.zeros(10, np.float32)
    theta[-2:] = 1.0                                          # two statistics: running_var at 1
    config = PSConfig(n_devices=1, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                      class_of=lambda d: "c", statistics=2)
    ps = ParameterServer(config, theta, EASGD(theta, 0.1), Hooks())

    def call(msg):
        reply = ps.process(b"peer", [bytes(memoryview(f)) if not isinstance(f, np.ndarray) else f.tobytes()
                                     for f in wire.encode(msg)])
        return wire.decode(reply) if reply else None
    session = call(wire.Hello(0, "", 0)).session
    values = np.zeros(10, np.float32)
    values[-2:] = 5000.0                                      # a variance that grew: 5,000 × Θ₀'s scale
    assert isinstance(call(wire.Push(session, 1, 0, values, None)), wire.Ack)
    assert ps.theta[-1] == 5001.0 and ps.failure is None and ps.value_limit() > 0 and ps.failure is None
    assert ps.meter.statistics_bytes == 8 and ps.meter.to_dict()["statistics_bytes"] == 8
    values[-1] = np.nan
    assert "NaN" in call(wire.Push(session, 2, 1, values, None)).message
    values[-1], values[0] = 0.0, 5000.0                       # a weight moved that far: poison
    assert "out of bounds" in call(wire.Push(session, 3, 1, values, None)).message
