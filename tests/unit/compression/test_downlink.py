"""Compressed pulls: full f16/bf16 models, deltas since the device's last pull, no drift."""
import numpy as np
import pytest

from edgebed.compression.downlink import ModelDownlink, PulledModel
from edgebed import wire
from edgebed.wire.codec import Codec


def through_wire(msg):
    return wire.decode([bytes(memoryview(f)) if not isinstance(f, np.ndarray) else f.tobytes()
                        for f in wire.encode(msg)])


@pytest.mark.parametrize("values", ["f32", "f16", "bf16"])
def test_delta_pulls_track_theta_without_drift(values):
    rng = np.random.default_rng(0)
    theta = rng.normal(0, 0.1, 5000).astype(np.float32)
    ps, dev = ModelDownlink(Codec(values), delta=True), PulledModel(keep=True)
    kinds, sizes = [], []
    for version in range(30):
        idx = rng.choice(theta.size, 50, replace=False)      # a few sparse updates between pulls
        theta[idx] -= rng.normal(0, 1e-3, 50).astype(np.float32)
        msg = ps.model(7, version, theta)
        frames = wire.encode(msg)
        sizes.append(wire.frames_nbytes(frames))
        got = dev.receive(through_wire(msg))
        kinds.append(msg.delta)
        # the device holds exactly the PS's copy, and it is one rounding of Θ away, not accumulated
        np.testing.assert_array_equal(got.params, ps.held[7][2])
        tol = {"f32": 0, "f16": 1e-3, "bf16": 8e-3}[values]
        np.testing.assert_allclose(got.params, theta, rtol=tol, atol=1e-4 if values != "f32" else 0)
    assert kinds[0] is False and all(kinds[1:])
    assert max(sizes[1:]) < sizes[0] / 10


def test_delta_falls_back_to_full_when_larger():
    theta = np.zeros(1000, np.float32)
    ps = ModelDownlink(Codec("f32"), delta=True)
    ps.model(0, 0, theta)
    theta += 1.0   # every entry changed: a delta would be bigger than the model
    assert not ps.model(0, 1, theta).delta
    ps.forget(0)
    assert not ps.model(0, 2, theta).delta


def test_delta_against_the_wrong_base_is_a_clear_error():
    dev = PulledModel(keep=True)
    dev.receive(wire.Model(3, np.zeros(4, np.float32)))
    with pytest.raises(RuntimeError, match="delta against version 5, but this device holds version 3"):
        dev.receive(wire.Model(6, np.ones(1, np.float32), indices=np.array([1], np.uint32), base=5))


def test_f16_full_pull_halves_the_bytes():
    theta = np.random.default_rng(1).normal(0, 0.1, 211_690).astype(np.float32)
    full = wire.frames_nbytes(wire.encode(wire.Model(1, theta)))
    half = wire.frames_nbytes(wire.encode(ModelDownlink(Codec("f16")).model(0, 1, theta)))
    assert half < full * 0.51
