"""The PS serve loop over ZeroMQ (ROUTER socket): receive → ParameterServer.process → reply.

This is the only serve loop; every socket-based runtime (local, docker, spark) runs it, on a thread
of the engine process. Arrays are received and sent zero-copy.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Optional

import zmq

from .server import ParameterServer


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


class ZmqServer:
    """Binds a ROUTER socket and serves ``ps`` until ``stop()``; ``endpoint`` is the bound address."""

    def __init__(self, ps: ParameterServer, bind: str = "tcp://127.0.0.1:0",
                 context: Optional[zmq.Context] = None, configure_socket=None):
        limit_malloc_arenas()
        self.ps = ps
        self.ctx = context or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 0)   # replies to vanished peers are dropped
        self.sock.setsockopt(zmq.MAXMSGSIZE, ps.config.max_message_bytes)
        if configure_socket:
            configure_socket(self.sock)   # e.g. CURVE server keys
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
                            frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                        except zmq.Again:
                            break
                        peer, body = frames[0], [f.buffer for f in frames[1:]]
                        reply = self.ps.process(peer.bytes, body)
                        if reply is not None:
                            self.sock.send_multipart([peer, *reply], copy=False)
                self.ps.tick()   # held replies after a stop or a silent round member
        except BaseException as err:  # surfaced to the engine, which ends the run cleanly
            self.error = err
            raise
        finally:
            self.sock.close(0)

    def _send_held(self, peer: bytes, frames: list) -> None:
        self.sock.send_multipart([peer, *frames], copy=False)

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
