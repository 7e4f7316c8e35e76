"""ConnectionGate: at most ``max_peers`` connections to the PS's socket at a time.

ZeroMQ has no socket option for that, but it asks a ZAP handler about every new connection during its
handshake, and a socket monitor reports how handshakes ended and which connections closed. A
connection's handshake ends in one event (succeeded or failed) and the connection later closes
(disconnected), so the connections in use are those admitted plus those that failed, minus those
closed — counted without knowing which connection a handshake event belongs to (ZeroMQ doesn't say).
That count can run high, never low: an admitted connection whose handshake then fails counts once
more, and so does a refused one that stays open and fails again when it closes (libzmq 4.3.5:
``FAILED_AUTH``, later ``FAILED_NO_DETAIL``). So it is capped by the connections open (accepted and
not closed: exact, those events carry the connection's file descriptor) less the one asking, and it
starts again from zero whenever no connection is open. After a flood it may thus count connections
still handshaking beside the admitted ones, never more than are open: the cap holds, and honest
devices get in again as the flood's connections close (tests/integration/test_ps_peer_bounds.py;
counting every open connection instead would refuse all of a burst larger than the cap, where this
admits its first ``max_peers``). A handshake beyond ``max_peers`` in use is refused: the peer gets
no session and no reply, and libzmq does not reconnect it (an agent's request times out and it
rejoins on a new connection). In a plaintext run the gate is the ZAP handler itself (``zap=True``:
the socket gets a ZAP domain so that the NULL mechanism consults it); in a CURVE run the key
authenticator calls ``admit`` (``wire/auth.py``). ZAP is bound once per ZeroMQ context, so every server
has a context of its own (``ZmqServer``); a gate that can't bind ZAP refuses to start.
One thread (``ps-gate``) reads the monitor and answers ZAP; ``admit`` may be called from any thread.

Descriptors: the cap above counts handshakes, and a TCP connection that never begins one is never
asked about. Every accepted connection is on the monitor with its descriptor, though: one accepted
while the PS holds as many as its descriptor budget allows (ps/fdbudget.py) is shut down at once
(``shed``), so no flood of raw connections takes a descriptor the run needs.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Optional

import zmq
from zmq.utils.monitor import parse_monitor_message

from .fdbudget import FdBudget, shut

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"edgebed"
_FAILED = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | _FAILED


def _bind_zap(ctx: zmq.Context, within: float = 2.0) -> zmq.Socket:
    """The context's ZAP handler socket. libzmq frees the endpoint of a closed handler later, on its
    reaper thread, so a bind right after another server's gate closed may find it taken for a moment:
    try again for ``within`` s. A handler that holds it longer is a live one, and a gate that can't
    answer ZAP caps nothing: refuse to start rather than serve without the cap."""
    deadline = time.monotonic() + within
    while True:
        z = ctx.socket(zmq.REP)
        z.setsockopt(zmq.LINGER, 0)
        try:
            z.bind(ZAP_ENDPOINT)
            return z
        except zmq.ZMQError as err:
            z.close(0)
            if err.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                raise RuntimeError(f"the PS's connection gate can't bind {ZAP_ENDPOINT}: {err}. Another ZAP "
                                   "handler is live in this ZeroMQ context; give the server a context of its own "
                                   "(ZmqServer's default), or let that handler call ConnectionGate.admit "
                                   "(zap=False)") from err
            time.sleep(0.01)


class ConnectionGate:
    def __init__(self, sock: zmq.Socket, ctx: zmq.Context, max_peers: int, zap: bool = True):
        """Before ``sock`` binds. ``zap``: serve ZAP here (plaintext); False when another handler does."""
        self.max_peers = max_peers
        self.live = 0          # connections accepted and not closed (handshaking or admitted)
        self.admitted = 0      # handshakes this gate let through
        self.failed = 0        # handshakes that failed (refused here, bad key, bad greeting, peer gone)
        self.closed = 0        # connections that closed
        self.refused = 0       # handshakes refused for the cap
        self.peak = 0
        self.shed = 0          # connections shut down at accept: beyond the descriptor budget
        self.fds = FdBudget()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # The monitor by hand (not sock.get_monitor_socket) to make its queue unbounded before it
        # connects: with the default 1,000 a burst of connections could fill it, and libzmq's I/O
        # thread then waits for this thread to read.
        addr = f"inproc://edgebed-gate-{id(self):x}"
        sock.monitor(addr, _EVENTS)
        self._monitor = ctx.socket(zmq.PAIR)
        self._monitor.setsockopt(zmq.RCVHWM, 0)
        self._monitor.setsockopt(zmq.LINGER, 0)
        self._monitor.connect(addr)
        self._zap: Optional[zmq.Socket] = None
        if zap:
            self._zap = _bind_zap(ctx)
            sock.zap_domain = ZAP_DOMAIN
        self._thread = threading.Thread(target=self._run, name="ps-gate", daemon=True)
        self._thread.start()

    def in_use(self) -> int:
        """Connections admitted and not closed (at most those open: see the module's docstring)."""
        with self._lock:
            return self._counted(self.live)

    def _counted(self, open_: int) -> int:   # under the lock
        return max(0, min(self.admitted + self.failed - self.closed, open_))

    def admit(self) -> bool:
        """May the connection being handshaken go on? Any thread (a ZAP handler). The connection
        asking is open, not admitted: it doesn't count against itself. (The gate's thread reads the
        monitor before it answers ZAP; a CURVE authenticator's thread may ask before that read, and
        then counts one open connection fewer.)"""
        with self._lock:
            ok = self._counted(self.live - 1) < self.max_peers
            if ok:
                self.admitted += 1
                self.peak = max(self.peak, self._counted(self.live))
            else:
                self.refused += 1
        return ok

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._monitor, zmq.POLLIN)
        if self._zap is not None:
            poller.register(self._zap, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(100))
                while self._monitor in ready and self._monitor.poll(0):   # events first: a ZAP request
                    self._event(parse_monitor_message(self._monitor.recv_multipart()))   # follows its accept
                if self._zap is not None and self._zap in ready:
                    self._answer(self._zap.recv_multipart())
        except zmq.ZMQError:   # the context is ending
            pass
        except Exception as err:   # never silently: a dead gate would leave handshakes unanswered
            print(f"edgebed: the PS's connection gate failed: {err!r}", file=sys.stderr)
            raise
        finally:
            for s in (self._monitor, self._zap):
                if s is not None:
                    s.close(0)

    def _event(self, event: dict) -> None:
        kind = event["event"]
        with self._lock:
            if kind == zmq.EVENT_ACCEPTED:
                self.live += 1
                if self.live > self.fds.allowed(self.live) and shut(event["value"], _port(event["endpoint"])):
                    self.shed += 1
            elif kind == zmq.EVENT_DISCONNECTED:
                self.live = max(0, self.live - 1)
                self.closed += 1
                if self.live == 0:   # nothing open, nothing in use: what ran high starts again
                    self.admitted = self.failed = self.closed = 0
            elif kind & _FAILED:
                self.failed += 1

    def _answer(self, request: list) -> None:
        """ZAP 1.0: version, request id, domain, address, identity, mechanism, credentials…"""
        version, rid = request[0], request[1]
        ok = self.admit()
        self._zap.send_multipart([version, rid, b"200" if ok else b"400",
                                  b"OK" if ok else b"the PS has its maximum of connections", b"", b""])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    @property
    def alive(self) -> bool:
        """Whether the gate's thread (which owns its sockets) still runs."""
        return self._thread.is_alive()

    def state(self) -> dict:
        with self._lock:
            return {"max_peers": self.max_peers, "live": self.live, "peak": self.peak, "refused": self.refused,
                    "admitted": self.admitted, "in_use": self._counted(self.live), "shed": self.shed,
                    "fd_limit": self.fds.limit}


def _port(endpoint) -> int:
    """The port of a monitor event's endpoint (b"tcp://127.0.0.1:5555"); -1 for any other transport."""
    text = endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)
    tail = text.rsplit(":", 1)[-1]
    return int(tail) if text.startswith("tcp://") and tail.isdigit() else -1
