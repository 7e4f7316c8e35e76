"""ConnectionGate: at most ``max_peers`` connections to the PS's socket at a time.

ZeroMQ has no socket option for that, but it asks a ZAP handler about every new connection during its
handshake, and a socket monitor reports the connections that were accepted and that ended. The gate
counts live connections from the monitor and refuses a handshake while ``max_peers`` are open: the peer
gets no session and no reply (its socket retries, as ZeroMQ sockets do, and is refused again). In a
plaintext run the gate is the ZAP handler itself (``zap=True``: the socket gets a ZAP domain so that
the NULL mechanism consults it); in a CURVE run the key authenticator calls ``admit`` (``ps/auth.py``).
One thread (``ps-gate``) reads the monitor and answers ZAP; ``admit`` may be called from any thread.
"""
from __future__ import annotations

import threading
from typing import Optional

import zmq
from zmq.utils.monitor import parse_monitor_message

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_DOMAIN = b"edgebed"
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED


class ConnectionGate:
    def __init__(self, sock: zmq.Socket, ctx: zmq.Context, max_peers: int, zap: bool = True):
        """Before ``sock`` binds. ``zap``: serve ZAP here (plaintext); False when another handler does."""
        self.max_peers = max_peers
        self.live = 0          # connections accepted and not ended
        self.refused = 0       # handshakes refused for the cap
        self.peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._monitor = sock.get_monitor_socket(_EVENTS)
        self._zap: Optional[zmq.Socket] = None
        if zap:
            z = ctx.socket(zmq.REP)
            z.setsockopt(zmq.LINGER, 0)
            try:
                z.bind(ZAP_ENDPOINT)
            except zmq.ZMQError:   # another ZAP handler owns this context: it must call admit()
                z.close(0)
            else:
                self._zap = z
                sock.zap_domain = ZAP_DOMAIN
        self._thread = threading.Thread(target=self._run, name="ps-gate", daemon=True)
        self._thread.start()

    def admit(self) -> bool:
        """May the connection being handshaken go on? (It is already counted in ``live``.)"""
        with self._lock:
            ok = self.live <= self.max_peers
            self.refused += not ok
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
        finally:
            for s in (self._monitor, self._zap):
                if s is not None:
                    s.close(0)

    def _event(self, event: dict) -> None:
        with self._lock:
            if event["event"] == zmq.EVENT_ACCEPTED:
                self.live += 1
                self.peak = max(self.peak, self.live)
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self.live = max(0, self.live - 1)

    def _answer(self, request: list) -> None:
        """ZAP 1.0: version, request id, domain, address, identity, mechanism, credentials…"""
        version, rid = request[0], request[1]
        ok = self.admit()
        self._zap.send_multipart([version, rid, b"200" if ok else b"400",
                                  b"OK" if ok else b"the PS has its maximum of connections", b"", b""])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def state(self) -> dict:
        with self._lock:
            return {"max_peers": self.max_peers, "live": self.live, "peak": self.peak, "refused": self.refused}
