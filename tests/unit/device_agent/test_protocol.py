"""The device state machine (device_agent/protocol.py) without sockets or clocks: replies in, actions out."""
from __future__ import annotations

import numpy as np
import pytest

from edgebed.data import load_bundled
from edgebed.device_agent.protocol import Compute, DeviceProtocol, Exit, Freeze, Rejoin, Send, Wait
from edgebed.device_agent.trainer import Trainer
from edgebed.models import initial_theta
from edgebed import wire

pytestmark = pytest.mark.timeout(60)


def _welcome(compressor="top-c", policy=None, think="5ms"):
    return wire.Welcome("s1", {"seed": 1, "model": "mlp", "compressor": compressor,
                               "algorithm": {"batch_size": 10, "c": 0.01},
                               "policy": policy or {"name": "gradient"},
                               "speed_class": {"slowdown": 1.0, "think_time": {"dist": "constant", "mean": 0.005}}})


@pytest.fixture(scope="module")
def shard():
    ds = load_bundled(0.2, 0)
    return ds.train_x[:100], ds.train_y[:100]


def _machine(shard):
    return DeviceProtocol(2, "fast", lambda cfg: Trainer(cfg.model, *shard, 10, cfg.seed, 2))


def test_gradient_cycle_compresses_once_and_numbers_pushes(shard):
    m = _machine(shard)
    (hello,) = m.hello(0)
    assert isinstance(hello, Send) and hello.msg == wire.Hello(2, "fast", 0)
    assert m.receive(_welcome()) == [Send(wire.Pull("s1"))]
    theta, _ = initial_theta("mlp", 1)
    assert m.receive(wire.Model(0, theta)) == [Compute()]
    assert m.compute() == 1                          # one SGD step: what the virtual clock charges
    (wait,) = m.computed()
    assert isinstance(wait, Wait) and wait.parts == (0.005,)
    (push,) = m.waited()
    msg = push.msg
    assert isinstance(msg, wire.Push) and (msg.session, msg.seq, msg.version) == ("s1", 0, 0)
    assert msg.indices is not None and msg.values.size == int(np.ceil(theta.size * 0.01))   # top-c, c = 1 %
    assert np.isfinite(msg.loss)
    assert m.receive(wire.Ack(1)) == [Compute()]
    assert m.compute() == 0                          # an Ack costs no step: pull at once
    assert m.computed() == [Send(wire.Pull("s1"))]
    m.receive(wire.Model(1, theta))
    m.compute()
    m.computed()
    assert m.waited()[0].msg.seq == 1


def test_freeze_stop_and_errors(shard):
    m = _machine(shard)
    assert m.receive(wire.Error("bad-device", "no")) == [Exit(1, "PS refused: bad-device: no")]
    m.hello(0)
    m.receive(_welcome())
    assert m.receive(wire.Ack(3, freeze=True)) == [Freeze()]
    assert m.receive(wire.Stop("done")) == [Send(wire.Bye("s1", "stop")), Exit(0, "done")]
    assert m.receive(wire.Error("unknown-session", "restarted")) == [Rejoin("restarted")]
    m.hello(1)                                      # rejoined: a refusal now ends the device quietly
    assert m.receive(wire.Error("frozen", "crashed")) == [Exit(0, "refused on rejoin: crashed")]


def test_local_steps_policy_charges_its_steps_and_sends_a_dense_delta(shard):
    m = _machine(shard)
    m.hello(0)
    m.receive(_welcome("dense", {"name": "local-steps", "local_steps": 4, "lr": 0.05}))
    theta, _ = initial_theta("mlp", 1)
    m.receive(wire.Model(0, theta))
    assert m.compute() == 4
    m.computed()
    msg = m.waited()[0].msg
    assert msg.indices is None and msg.values.shape == theta.shape and np.abs(msg.values).sum() > 0


@pytest.mark.parametrize("compressor", ["top-c", "dense"])
def test_a_model_taken_early_gives_the_same_pushes_and_keeps_only_what_is_sent(shard, compressor):
    """The virtual clock's receive_early (the model taken when the PS sends it) against receive at its
    arrival: the same push bytes, push after push (batches and compressor drawn in the same order);
    in between, the early device holds the compressed push, no dense gradient and no Θ."""
    from edgebed.device_agent.trainer import SharedData
    theta, _ = initial_theta("mlp", 1)
    data, index = SharedData(*shard, "mlp"), np.arange(100, dtype=np.int32)
    late = _machine(shard)
    early = DeviceProtocol(2, "fast", lambda cfg: Trainer(cfg.model, None, None, 10, cfg.seed, 2,
                                                          data=data, index=index))
    for m in (late, early):
        m.hello(0)
        m.receive(_welcome(compressor))
    for version in range(3):
        model = wire.Model(version, theta + np.float32(version * 1e-3))
        assert late.receive(model) == [Compute()]
        assert late.compute() == 1
        early.receive_early(model)
        held = early._request
        if compressor == "top-c":
            assert held.compressed and held.values.size < theta.size // 50 and held.theta is None
        assert early.arrived() == [Compute()]
        assert early.compute() == 1
        pushes = [m.computed() and m.waited()[0].msg for m in (late, early)]
        a, b = ([bytes(memoryview(f)) for f in wire.encode(p)] for p in pushes)
        assert a == b and pushes[0].seq == version
        for m in (late, early):
            m.receive(wire.Ack(version + 1))
            m.compute()
            m.computed()


def _push_once(m, theta, version=0):
    m.receive(wire.Model(version, theta))
    m.compute()
    m.computed()
    (push,) = m.waited()
    return push.msg


def test_a_refused_push_is_not_the_devices_end_it_pulls_again_a_bounded_number_of_times(shard):
    """Issue 51, 4: an honest device whose push is refused ``bad-payload`` (its gradient out of bounds
    at a Θ another device poisoned) pulls Θ afresh and goes on; an applied push resets the count; only
    MAX_REFUSED refusals in a row end it, with an error that says so. Before, the first refusal ended it."""
    from edgebed.device_agent.protocol import MAX_REFUSED
    m = _machine(shard)
    m.hello(0)
    m.receive(_welcome())
    theta, _ = initial_theta("mlp", 1)
    refusal = wire.Error("bad-payload", "values out of bounds: they would move Θ by far more than its own scale")
    _push_once(m, theta)
    assert m.receive(refusal) == [Send(wire.Pull("s1"))]
    assert _push_once(m, theta).seq == 1
    assert m.receive(wire.Ack(1)) == [Compute()]          # applied: the count starts again
    m.compute()
    m.computed()
    for i in range(MAX_REFUSED - 1):
        _push_once(m, theta)
        assert m.receive(refusal) == [Send(wire.Pull("s1"))], i
    _push_once(m, theta)
    (end,) = m.receive(refusal)
    assert isinstance(end, Exit) and end.code == 1
    assert f"refused {MAX_REFUSED} pushes in a row" in end.reason and "out of bounds" in end.reason
    # a refusal of anything but a push is still the end (the PS refused the device, not one update)
    m2 = _machine(shard)
    m2.hello(0)
    m2.receive(_welcome())
    assert m2.receive(wire.Error("bad-payload", "x")) == [Exit(1, "PS refused: bad-payload: x")]
