"""Stalled connections cannot hold the PS's connection cap (issue 51, point 2).

40 connections that complete the ZMTP handshake and then stop mid-frame (a header announcing 1,000
bytes, 10 of them sent) held the cap (2·n + 16) with no time-out: no new hello was answered while they
stayed open. The frame guard now cuts a connection whose peer sent no byte for ``stall_s`` while it
owes the rest of a message (or its first one); without the guard, ZMTP heartbeats on the PS's socket
do it. Progress keeps a connection: an honest peer that sends a big frame slowly is never cut.
"""
from __future__ import annotations

import threading
import time

import pytest
import zmq

from edgebed import wire
from edgebed.ps import frameguard
from edgebed.ps.serve import ZmqServer
from tests import zmtp_raw
from tests.integration.test_ps_peer_bounds import ask, capped_ps, peer

pytestmark = pytest.mark.timeout(60)
STALLERS = 40
STALL_S = 1.0


@pytest.fixture(params=["guard", "no-guard"])
def server(request, monkeypatch):
    if request.param == "guard" and not frameguard.FAST:
        pytest.skip("the frame guard (edgebed/ps/_frameguard.c) is not built here")
    monkeypatch.setattr(frameguard, "FAST", request.param == "guard" and frameguard.FAST)
    ps = capped_ps(1000)
    ps.config.max_peers = 2 * ps.config.n_devices + 16    # the default cap of 2 devices: 20
    ps.config.stall_s = STALL_S
    ps.events = []
    ps.hooks.record = lambda table, row: ps.events.append(row) if table == "events" else None
    srv = ZmqServer(ps, context=zmq.Context()).start()
    yield srv
    srv.stop()
    srv.ctx.term()


def _host_port(srv):
    host, port = srv.endpoint[len("tcp://"):].rsplit(":", 1)
    return host, int(port)


def _stall(srv, out: list) -> None:
    """A connection through its handshake, then a frame header announcing 1,000 bytes and 10 of them."""
    try:
        s = zmtp_raw.connect(*_host_port(srv))
    except (ConnectionError, OSError):
        return
    s.sendall(b"\x02" + (1000).to_bytes(8, "big") + b"x" * 10)
    out.append(s)


def test_forty_stalled_connections_are_cut_and_a_new_device_gets_in(server):
    stalled: list = []
    threads = [threading.Thread(target=_stall, args=(server, stalled)) for _ in range(STALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(stalled) >= 16, len(stalled)   # the cap was filled by stalled connections
        t0 = time.monotonic()
        s = peer(server)
        try:
            got = ask(s, wire.Hello(1), int((STALL_S * 4 + 3) * 1000))
            assert isinstance(got, wire.Welcome), server.gate.state()   # answered once the stalled were cut
        finally:
            s.close()
        assert time.monotonic() - t0 < STALL_S * 4 + 3
        assert server.gate.state()["refused"] >= 1     # and the cap had refused someone meanwhile
        assert any(e["event"] == "refused-at-cap" for e in server.ps.events)   # which the run's events say
    finally:
        for c in stalled:
            c.close()


def test_an_honest_peer_sending_a_big_frame_slowly_is_not_cut(server):
    """100 kB in ten chunks over 3·stall_s (a chunk every 0.3·stall_s): progress, never silence beyond the
    time-out. Without the guard libzmq's heartbeats judge whole frames (documented): there the same
    frame crosses in 0.6·stall_s."""
    over = 3.0 if server.guard is not None else 0.6
    s = zmtp_raw.connect(*_host_port(server))
    try:
        body = wire._PREFIX.pack(b"EB", 1, 3) + b'{"session":"x","arrays":[]}'
        s.sendall(zmtp_raw.frame(body, True) + b"\x02" + (100_000).to_bytes(8, "big"))
        for _ in range(10):
            s.sendall(b"y" * 10_000)
            time.sleep(STALL_S * over / 10)
        assert zmtp_raw.wait_for(s, b"EB", 5)   # the message arrived whole and the PS answered it
    finally:
        s.close()
