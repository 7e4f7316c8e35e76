"""Contract of UpdateRule: every registered rule honours the interface the PS relies on."""

import numpy as np
import pytest

from edgebed.compression import make_compressor
from edgebed.models import initial_theta
from edgebed.algorithms import CompressingParams
from edgebed.ps.rules import RULES, Applied


@pytest.fixture(scope="module")
def cnn():
    return initial_theta("cnn", 0)


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_applies_its_own_compressors_output_in_place(name, cnn):
    theta0, layers = cnn
    theta = theta0.copy()
    rule = RULES[name](theta, 0.1)
    assert rule.name == name
    comp = make_compressor(rule.compressor, 0.01, layers)
    g = np.random.default_rng(0).normal(size=theta.size).astype(np.float32)
    sent = comp.compress(g)
    rule.on_pull(0, 0)
    out = rule.apply(0, 0, sent.values, sent.indices)
    assert isinstance(out, Applied) and out.staleness == 0
    changed = np.flatnonzero(theta != theta0)
    expected = np.arange(theta.size) if sent.indices is None else sent.indices
    assert set(changed) <= set(expected.tolist())
    # at staleness 0 a gradient rule moves each sent entry by exactly -α·g; a delta rule (model
    # averaging, EASGD) adds the only live device's delta as it is: the mean of one Δ, or c + e
    gradient = rule.device_policy(rule.Params())["name"] == "gradient"
    step = -0.1 * g if gradient else g
    np.testing.assert_allclose(theta[expected] - theta0[expected], step[expected], rtol=1e-4, atol=1e-7)
    assert rule.ready(0, "push") and rule.ready(0, "pull")   # a lone device's round is closed


@pytest.mark.parametrize("name", sorted(RULES))
def test_stale_updates_move_less(name, cnn):
    theta0, layers = cnn
    moves = []
    for staleness in (0, 5):
        theta = theta0.copy()
        rule = RULES[name](theta, 0.1)
        comp = make_compressor(rule.compressor, 0.01, layers)
        g = np.ones(theta.size, np.float32)
        rule.on_pull(1, 0)
        for _ in range(staleness):   # other devices' updates in between
            rule.on_pull(2, 0)
            s = comp.compress(g)
            rule.apply(2, 0, s.values, s.indices)
        before = theta.copy()
        s = comp.compress(g)
        rule.apply(1, staleness, s.values, s.indices)
        moves.append(float(np.abs(theta - before).sum()))
    if RULES[name].device_policy(RULES[name].Params())["name"] == "gradient":
        assert moves[1] < moves[0]
    else:   # averaging is staleness-insensitive by design (barrier / elastic force): never amplified
        assert moves[1] <= moves[0] * (1 + 1e-6)


@pytest.mark.parametrize("name", sorted(RULES))
def test_state_dict_roundtrip(name, cnn):
    theta0, layers = cnn
    rule = RULES[name](theta0.copy(), 0.1)
    state = rule.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    rule2 = RULES[name](theta0.copy(), 0.1)
    rule2.load_state_dict(state)
    for k, v in rule2.state_dict().items():
        np.testing.assert_array_equal(v, state[k])
    rule.forget(12345)   # forgetting an unknown device is harmless


@pytest.mark.parametrize("name", sorted(RULES))
def test_rule_owns_its_parameters(name):
    """The scenario's algorithm section for this rule: its Params, named like the rule, holding c
    exactly when the rule's devices compress (so c is asked for where it means something)."""
    rule = RULES[name]
    params = rule.Params()
    assert params.name == name
    assert isinstance(params, CompressingParams) == rule.uses_c() == ("c" in rule.Params.model_fields)
    assert params.ratio == (params.c if rule.uses_c() else 1.0)
    policy = rule.device_policy(params)
    if policy["name"] != "gradient":   # what devices are told: α and every own parameter
        assert policy == {"name": rule.policy, "lr": params.lr, **params.own()}
