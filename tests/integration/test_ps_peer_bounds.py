"""Bounded peers (issue 29) on a real ROUTER socket: a cap on connections, at most two models in flight
per connection, egress that counts only replies sent, and a frame-count refusal with the real count."""
from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from edgebed import wire
from edgebed.ps.rules import RULES
from edgebed.ps.serve import ZmqServer
from edgebed.ps.server import MAX_MODELS_IN_FLIGHT, ParameterServer, PSConfig

pytestmark = pytest.mark.timeout(60)
N = 199_210   # the MLP: a model is 797 kB


@pytest.fixture
def server():
    theta = np.zeros(N, np.float32)
    ps = ParameterServer(PSConfig(n_devices=2, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "c", max_peers=3),
                         theta, RULES["asgd"](theta, 0.1))
    srv = ZmqServer(ps, context=zmq.Context()).start()
    yield srv
    srv.stop()
    srv.ctx.term()


def peer(srv: ZmqServer, rcvhwm: int = 1000) -> zmq.Socket:
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, rcvhwm)
    s.connect(srv.endpoint)
    return s


def ask(s: zmq.Socket, msg, timeout_ms: int = 3000):
    s.send_multipart(wire.encode(msg) if isinstance(msg, wire.Message) else msg)
    return wire.decode(s.recv_multipart()) if s.poll(timeout_ms) else None


def test_connections_beyond_the_cap_get_no_session_until_one_leaves(server):
    socks = []
    try:
        for _ in range(3):   # one at a time: each is admitted
            socks.append(peer(server))
            assert isinstance(ask(socks[-1], wire.Hello(0)), wire.Welcome)
        socks.append(peer(server))
        assert ask(socks[-1], wire.Hello(1), 1000) is None   # refused at the handshake: no reply at all
        assert server.gate.state()["refused"] == 1
        socks.pop(0).close()                                  # one leaves: a new connection gets in
        time.sleep(0.3)
        socks.append(peer(server))
        assert isinstance(ask(socks[-1], wire.Hello(1)), wire.Welcome)
        assert server.gate.state()["live"] == 3               # the PS closed the refused one
    finally:
        for s in socks:
            s.close()


def test_unread_pulls_get_two_models_then_busy_and_egress_counts_what_was_sent(server):
    s = peer(server, rcvhwm=1)
    session = ask(s, wire.Hello(0)).session
    for _ in range(30):
        s.send_multipart(wire.encode(wire.Pull(session)))   # and never read
    time.sleep(1.5)
    ps = server.ps
    with ps.lock:   # the serve thread's state
        models = ps.meter.by_kind["model"]["out_msgs"]
        errors = dict(ps.errors)
        meter = ps.meter.state()
        held = max((server._models_in_flight(p) for p in list(server._in_flight)), default=0)
    # The kernel's socket buffers take a few models; ZeroMQ itself holds at most MAX_MODELS_IN_FLIGHT.
    assert held <= MAX_MODELS_IN_FLIGHT
    assert models < 15 and errors["busy"] == 30 - models, (models, errors)
    # Replies the socket dropped (the peer's queue full) are not egress.
    assert meter["unsent_msgs"] == errors.get("unread-reply", 0) + errors.get("peer-gone", 0)
    out = sum(k["out_msgs"] for k in meter["by_kind"].values())
    assert out == 1 + 30 - meter["unsent_msgs"]               # welcome + the pulls' replies that left
    s.close()


def test_an_honest_request_reply_peer_is_never_busy(server):
    """Pull, push, pull, … with every reply read: never refused (a device exits on a refusal)."""
    s = peer(server)
    session = ask(s, wire.Hello(0)).session
    for seq in range(50):
        model = ask(s, wire.Pull(session))
        assert isinstance(model, wire.Model), model
        assert ask(s, wire.Push(session, seq, model.version, np.zeros(4, np.float32),
                                np.arange(4, dtype=np.uint32))).applied
    assert "busy" not in server.ps.errors
    s.close()


def test_a_message_of_too_many_frames_is_refused_with_its_real_count(server):
    s = peer(server)
    reply = ask(s, [wire._PREFIX.pack(b"EB", 1, 3) + b'{"session":"x","arrays":[]}'] + [b""] * 100_000, 20_000)
    assert isinstance(reply, wire.Error) and reply.code == "frame-count"
    assert reply.message.startswith("100001 frames"), reply.message
    assert server.ps.meter.by_kind["malformed"]["in_msgs"] == 1 and server.ps.meter.rejected == 1
    s.close()
