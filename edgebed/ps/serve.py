"""The PS serve loop over ZeroMQ (ROUTER socket): receive → ParameterServer.process → reply.

This is the only serve loop; every socket-based runtime (local, docker, spark) runs it, on a thread
of the engine process. Arrays are received and sent zero-copy.

Back-pressure: every peer has a send queue of at most ``SEND_HWM`` messages. A reply that doesn't fit
(the peer isn't reading) is dropped and counted (``ps.errors["unread-reply"]``), and the peer is
``busy``: its pulls are answered with a small ``busy`` Error instead of a model until a reply gets
through again. Messages are received frame by frame, so a message of a million frames costs a
million small receives, never a million frames in memory.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Optional

import zmq

from . import wire
from .server import ParameterServer

SEND_HWM = 16   # messages queued per peer. An agent has one request in flight, but libzmq frees queue
#               slots late and in batches (4 would drop a reply to a peer with 2 in flight): keep room.


M_ARENA_MAX = -8   # glibc mallopt parameter


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas (like MALLOC_ARENA_MAX) before the serve and ZeroMQ threads exist.

    Each thread otherwise gets its own arena; model-sized reply buffers freed in one and reused in
    another fragment them, and RSS steps up without a leak (soak: +12 % once at ~300 s by default,
    flat within ±3.5 % with 2 arenas — benchmarks/results/soak*.json). False where not glibc."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False


def _malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class ZmqServer:
    """Binds a ROUTER socket and serves ``ps`` until ``stop()``; ``endpoint`` is the bound address."""

    def __init__(self, ps: ParameterServer, bind: str = "tcp://127.0.0.1:0",
                 context: Optional[zmq.Context] = None, configure_socket=None,
                 device_of: Optional[dict] = None):
        limit_malloc_arenas()
        self.ps = ps
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # Mandatory: a send to a vanished peer or into a full queue fails at once (and is counted)
        # instead of queueing without bound or vanishing silently.
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.SNDHWM, SEND_HWM)
        self.sock.setsockopt(zmq.MAXMSGSIZE, ps.config.max_message_bytes)
        if configure_socket:
            configure_socket(self.sock)   # e.g. CURVE server keys
        self.device_of = device_of        # CURVE: client key (Z85) → the device it belongs to
        if bind.endswith(":0"):
            port = self.sock.bind_to_random_port(bind[: bind.rindex(":")])
            self.endpoint = f"{bind[: bind.rindex(':')]}:{port}"
        else:
            self.sock.bind(bind)
            self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        ps.hooks.send = self._send_held   # replies held by round-based rules leave from the serve thread
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None

    def serve(self) -> None:
        """Run the loop in the calling thread until stop()."""
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if poller.poll(100):
                    while True:
                        try:
                            peer, body, principal = self._recv()
                        except zmq.Again:
                            break
                        with self.ps.lock:
                            reply = self.ps.process(peer, body, principal)
                            if reply is not None:
                                self._send(peer, reply)
                with self.ps.lock:
                    self.ps.tick()   # held replies after a stop or a silent round member
        except BaseException as err:  # surfaced to the engine, which ends the run cleanly
            self.error = err
            raise
        finally:
            self.sock.close(0)

    def _recv(self) -> tuple[bytes, list, Optional[int]]:
        """One message: (peer, frames, device of its CURVE key or None). At most MAX_FRAMES + 1 frames
        are kept (enough for decode to refuse the message); the rest are received and freed one by one."""
        first = self.sock.recv(zmq.NOBLOCK, copy=False)
        principal = None
        if self.device_of is not None:   # an unknown key never gets here: ZAP refused its handshake
            principal = self.device_of.get(first.get("User-Id"))
        body, more, dropped = [], first.more, 0
        while more:
            frame = self.sock.recv(copy=False)
            more = frame.more
            if len(body) <= wire.MAX_FRAMES:
                body.append(frame.buffer)
            else:
                dropped += 1
        if dropped > 10_000:   # libzmq queued them all (~64 B each); give that memory back to the OS
            _malloc_trim()
        return first.bytes, body, principal

    def _send(self, peer: bytes, frames: list) -> None:
        """Send without blocking; a full queue (peer not reading) or a vanished peer drops the reply."""
        try:
            self.sock.send_multipart([peer, *frames], flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self.ps.busy_peers.add(peer)
            self.ps.errors["unread-reply"] = self.ps.errors.get("unread-reply", 0) + 1
            return
        except zmq.ZMQError as err:
            if err.errno != zmq.EHOSTUNREACH:
                raise
            self.ps.busy_peers.discard(peer)
            self.ps.errors["peer-gone"] = self.ps.errors.get("peer-gone", 0) + 1
            return
        self.ps.busy_peers.discard(peer)

    def _send_held(self, peer: bytes, frames: list) -> None:
        self._send(peer, frames)

    def start(self) -> "ZmqServer":
        self._thread = threading.Thread(target=self.serve, name="ps-serve", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
