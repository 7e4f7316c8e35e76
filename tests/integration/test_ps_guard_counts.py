"""Every flooding connection the frame guard cuts is counted (issue 51, point 13: four floods counted as
two ``cut-frames``). A flood sent without waiting for the PS's handshake reached libzmq before its ZAP
answer; libzmq reset the connection and the guard, never having judged the flood, counted nothing. The
guard now holds a peer's data frames until the PS's READY has passed, and judges them meanwhile."""
from __future__ import annotations

import socket
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
FLOODS = 4


def _flood(host: str, port: int, msg: bytes) -> None:
    """Greeting, READY and the flood's first 100 frames at once, the rest 0.3 s later (after libzmq
    would have reset the connection for data before its handshake ended)."""
    s = socket.create_connection((host, port))
    try:
        s.sendall(zmtp_raw.GREETING + zmtp_raw._ready() + msg[:200])
        time.sleep(0.3)
        s.sendall(msg[200:])
        time.sleep(0.3)
    except OSError:   # cut: what the guard does
        pass
    finally:
        s.close()


def test_four_floods_that_do_not_wait_for_the_handshake_count_as_four_cuts():
    if not frameguard.FAST:
        pytest.skip("the frame guard (edgebed/ps/_frameguard.c) is not built here")
    ps = capped_ps(1000)
    srv = ZmqServer(ps, context=zmq.Context()).start()
    host, port = srv.endpoint[len("tcp://"):].rsplit(":", 1)
    msg = zmtp_raw.many_frames(wire._PREFIX.pack(b"EB", 1, 3) + b'{"session":"x","arrays":[]}', 100_000)
    try:
        floods = [threading.Thread(target=_flood, args=(host, int(port), msg)) for _ in range(FLOODS)]
        for t in floods:
            t.start()
        for t in floods:
            t.join()
        s = peer(srv)   # and an honest device still gets in (its data waited for the handshake as ever)
        try:
            assert isinstance(ask(s, wire.Hello(0)), wire.Welcome)
        finally:
            s.close()
    finally:
        srv.stop()
        srv.ctx.term()
    assert ps.errors.get("cut-frames") == FLOODS, ps.errors
