"""Messages of many frames cost the PS little time and no GIL (issue 36, point 2).

libzmq holds a multipart message whole before the PS sees it, and the PS's socket yields no other
peer's message until it has read that one to its end: the frames of a refused message are received and
freed while honest devices wait. Four concurrent messages of a million frames cut honest updates by
82 % for 24.8 s (issue 36). The PS now discards them in C with the GIL let go (ps/discard.py); this
checks, against the Python loop measured in the same test on the same socket, that the four are
refused in at most half its time. This is the PS's second line, for endpoints its frame guard can't
take and CURVE streams the guard relays unparsed (ps/frameguard.py; tests/integration/
test_ps_frame_guard.py); the server here runs without the guard. The honest update rates under such
floods are measured by benchmarks/hostile_soak.py (category "concurrent frame floods").
"""
from __future__ import annotations

import threading
import time

import pytest
import zmq

from edgebed import wire
from edgebed.ps import discard, frameguard
from edgebed.ps.serve import ZmqServer
from tests import zmtp_raw
from tests.integration.test_ps_peer_bounds import capped_ps

pytestmark = [pytest.mark.timeout(90), pytest.mark.measures]
FRAMES = 300_000
SENDERS = 4


def _refuse_concurrent_floods(srv: ZmqServer) -> float:
    """Seconds from four floods sent at once to the last of their four ``frame-count`` refusals."""
    host, port = srv.endpoint[len("tcp://"):].rsplit(":", 1)
    msg = zmtp_raw.many_frames(wire._PREFIX.pack(b"EB", 1, 3) + b'{"session":"x","arrays":[]}', FRAMES)
    socks = [zmtp_raw.connect(host, int(port)) for _ in range(SENDERS)]
    refused = [False] * SENDERS
    t0 = time.monotonic()
    threads = [threading.Thread(target=lambda k=k: (socks[k].sendall(msg), refused.__setitem__(
        k, zmtp_raw.wait_for(socks[k], b"frame-count", 60)))) for k in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - t0
    for s in socks:
        s.close()
    assert all(refused), refused
    return took


def test_four_concurrent_floods_are_refused_in_at_most_half_the_python_loops_time(monkeypatch):
    if not discard.FAST:
        pytest.skip("the compiled discard (edgebed/ps/_discard.c) is not built here")
    monkeypatch.setattr(frameguard, "FAST", False)
    ps = capped_ps(16)
    ps.config.max_peers = 16
    srv = ZmqServer(ps, context=zmq.Context()).start()
    try:
        compiled = _refuse_concurrent_floods(srv)
        monkeypatch.setattr(discard, "FAST", False)
        python = _refuse_concurrent_floods(srv)
    finally:
        srv.stop()
        srv.ctx.term()
    assert ps.errors["frame-count"] == 2 * SENDERS
    assert compiled <= 0.5 * python, (compiled, python)
