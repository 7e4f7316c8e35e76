"""Contract of Compressor: every configuration yields a payload the wire carries and the PS accepts."""
import itertools

import numpy as np
import pytest

from edgebed.compression import SELECTIONS, make_compressor
from edgebed.models import initial_theta
from edgebed import wire
from edgebed.wire.codec import Codec
from edgebed.ps.rules import ASGD
from edgebed.ps.server import Hooks, ParameterServer, PSConfig

CONFIGS = [(sel, ef, q) for sel, ef, q in itertools.product(SELECTIONS, (False, True), ("none", "q8"))]


@pytest.fixture(scope="module")
def cnn():
    return initial_theta("cnn", 0)


@pytest.mark.parametrize("selection,ef,quantize", CONFIGS)
def test_every_compressor_payload_crosses_the_wire_and_is_accepted(selection, ef, quantize, cnn):
    theta, layers = cnn
    comp = make_compressor(selection, 0.01, layers, error_feedback=ef, quantize=quantize,
                           rng=np.random.default_rng(0))
    ps = ParameterServer(PSConfig(n_devices=1, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: ""),
                         theta.copy(), ASGD(theta.copy(), 0.1), Hooks())
    session = wire.decode(ps.process(b"p", wire.encode(wire.Hello(0)))).session
    rng = np.random.default_rng(1)
    for seq in range(2):   # stateful compressors: pushes in a row
        s = comp.compress(rng.normal(0, 0.01, theta.size).astype(np.float32))
        assert s.values.dtype == np.float32 and np.isfinite(s.values).all()
        if s.indices is not None:
            assert s.indices.dtype == np.uint32 and s.indices.size == s.values.size
            assert np.all(np.diff(s.indices.astype(np.int64)) > 0) and int(s.indices[-1]) < theta.size
        codec = Codec("f32") if quantize == "q8" else None   # q8 codes need wire v2
        frames = [bytes(memoryview(f)) for f in wire.encode(
            wire.Push(session, seq, ps.version, s.values, s.indices, codec=codec, q8=s.q8))]
        reply = wire.decode(ps.process(b"p", frames))
        assert isinstance(reply, wire.Ack) and reply.applied, reply
        if quantize == "q8":   # one byte a value on the wire (plus indices and one scale per layer)
            assert len(frames[1]) < s.values.size * (1 if s.indices is None else 5) + 8 * len(layers) + 1


@pytest.mark.parametrize("selection", SELECTIONS)
def test_error_feedback_conserves_the_gradient(selection, cnn):
    theta, layers = cnn
    comp = make_compressor(selection, 0.01, layers, error_feedback=True)
    total, sent = np.zeros(theta.size, np.float64), np.zeros(theta.size, np.float64)
    rng = np.random.default_rng(2)
    for _ in range(3):
        g = rng.normal(0, 0.01, theta.size).astype(np.float32)
        total += g
        s = comp.compress(g)
        if s.indices is None:
            sent += s.values
        else:
            sent[s.indices] += s.values
    np.testing.assert_allclose(sent + comp.residual, total, atol=1e-5)
