"""The PS serve loop over ZeroMQ (ROUTER socket): receive → ParameterServer.process → reply.

This is the only serve loop; every socket-based runtime (local, docker, spark) runs it, on a thread
of the engine process. Arrays are received and sent zero-copy.

Back-pressure: every peer has a send queue of at most ``SEND_HWM`` messages. A reply that doesn't fit
(the peer isn't reading) is dropped, counted (``ps.errors["unread-reply"]``) and taken out of egress
(``ps.unsent``), and the peer is ``busy``: its pulls are answered with a small ``busy`` Error instead
of a model until a reply gets through again. Models are sent tracked: a connection for which ZeroMQ
still holds ``MAX_MODELS_IN_FLIGHT`` models gets ``busy`` too (ps/server.py), and a sweep every
``SWEEP_EVERY`` s forgets what closed connections held and trims the heap. ``ConnectionGate``
(ps/gate.py) admits at most ``max_peers_for(config)`` connections and shuts down, at accept, any
beyond the process's descriptor budget (ps/fdbudget.py).

Frames: ``MAXMSGSIZE`` bounds each frame, not a message: libzmq queues a multipart message whole
before the receiver sees its first frame, so a message of ten million empty frames is held in memory
(~64 B a frame) before this loop can refuse it, and no socket option limits the frames of a message
(docs/security.md). Peers therefore reach the socket through the frame guard (ps/frameguard.py) where
it is built and the endpoint is IPv4 TCP: it cuts a connection at a message's 257th frame, before
libzmq queues it, and the socket itself is bound to a private ipc:// path. This loop keeps at most ``MAX_FRAMES`` + 1 frames of a message, frees the rest one
by one without ``ps.lock`` (and without the GIL, in C: ps/discard.py), trims the heap after a large one
and refuses it with its real frame count.

Speed: the socket is drained in batches — one poll, then non-blocking receives until it is empty or
``BATCH`` messages were served — with ``ps.lock`` taken once per batch, so a burst of pushes costs one
wake-up and one lock, and other threads wait at most one batch for the lock (the lock is let go
while the surplus frames of an oversized message are discarded). Every reply leaves as soon as it is
made, so its device computes while the PS serves the rest of the batch (acks held to the end of the
batch saved the ZeroMQ I/O thread a few µs per push but left devices and PS taking turns); a model
leaving at once also means unread pulls never pile up model copies.
"""
from __future__ import annotations

import ctypes
import threading
import time
from typing import Optional

import zmq

from .. import wire
from . import frameguard
from .discard import discard_rest
from .gate import ConnectionGate
from .server import ParameterServer, max_peers_for

BATCH = 64      # messages served per lock acquisition (bounds how long the engine waits for ps.lock)
SWEEP_EVERY = 1.0        # s between two looks at the models in flight of every peer
SWEEP_TRIM_MODELS = 8    # models let go of in one sweep that are worth a malloc_trim
SEND_HWM = 16   # messages queued per peer. An agent has one request in flight, but libzmq frees queue
#               slots late and in batches (4 would drop a reply to a peer with 2 in flight): keep room.


_MORE = zmq.NOBLOCK | zmq.SNDMORE
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8   # glibc mallopt parameters
MMAP_THRESHOLD = 4 << 20   # bytes: a pushed or pulled model (847 kB) comes from the heap, not mmap
TRIM_THRESHOLD = 8 << 20   # bytes of free heap top kept: about ten models, so none is faulted in anew


def tune_malloc(arenas: int = 2) -> bool:
    """Before the serve and ZeroMQ threads exist: cap glibc's malloc arenas (like MALLOC_ARENA_MAX)
    and keep model-sized buffers in the heap.

    Arenas: each thread otherwise gets its own; model-sized reply buffers freed in one and reused in
    another fragment them, and RSS steps up without a leak (soak: +12 % once at ~300 s by default,
    flat within ±3.5 % with 2 arenas — benchmarks/results/soak*.json).
    Thresholds: with the arena cap, every 847 kB message ZeroMQ received (and every model copy) was
    mmapped or trimmed off the heap top when freed, then faulted in page by page again: 70–100 minor
    faults and ~200 of 300 CPU µs per dense push through the serve loop. A fixed mmap threshold of
    4 MiB and trim threshold of 8 MiB keep them in the heap (0 faults, ~90 µs; at most 8 MiB of free
    heap top kept per arena). False where not glibc."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
        return all([mallopt(M_ARENA_MAX, arenas), mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                    mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)])
    except (OSError, AttributeError):
        return False


def _heartbeats(sock: zmq.Socket, stall_ms: int) -> None:
    """No frame guard: ZMTP heartbeats close a connection that sent no whole frame (nor a PONG) within
    ``stall_ms`` of a PING, so stalled peers cannot hold the cap. libzmq judges whole frames, not
    progress: here a frame that takes longer than ``stall_ms`` to cross is cut too (ps/frameguard.py)."""
    if stall_ms > 0:
        sock.setsockopt(zmq.HEARTBEAT_IVL, max(100, stall_ms // 3))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, stall_ms)


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
        tune_malloc()
        self.ps = ps
        # A context of its own unless given one: ZAP (the gate) is bound per context, and another
        # server's handler in a shared one would take it (ps/gate.py). Ended by stop().
        self._own_ctx = context is None
        self.ctx = context or zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # Mandatory: a send to a vanished peer or into a full queue fails at once (and is counted)
        # instead of queueing without bound or vanishing silently.
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.SNDHWM, SEND_HWM)
        self.sock.setsockopt(zmq.MAXMSGSIZE, ps.config.max_message_bytes)
        if configure_socket:
            configure_socket(self.sock)   # e.g. CURVE server keys
        stall_ms = int(ps.config.stall_s * 1000)
        self.device_of = device_of        # CURVE: client key (Z85) → the device it belongs to
        # Before bind (the listener copies the socket's ZAP domain). CURVE runs: the key authenticator
        # owns ZAP and asks the gate (SocketTransport wires it).
        self.gate = ConnectionGate(self.sock, self.ctx, max_peers_for(ps.config), zap=device_of is None)
        self._in_flight: dict[bytes, list] = {}   # peer → trackers of models ZeroMQ still holds for it
        ps.hooks.in_flight, ps.hooks.consumed = self._models_in_flight, self._in_flight.pop
        # Peers reach the socket through the frame guard where it is built and the endpoint is IPv4
        # TCP: it cuts a message of too many frames or bytes before libzmq assembles it (ps/frameguard.py).
        self.guard: Optional[frameguard.FrameGuard] = None
        self._ipc_dir: Optional[str] = None
        where = frameguard.guardable(bind) if frameguard.FAST else None
        if where is not None:
            self._ipc_dir, path = frameguard.private_ipc()
            self.sock.bind(f"ipc://{path}")
            try:
                self.guard = frameguard.FrameGuard(*where, path, frameguard.CUT_FRAMES, ps.config.max_message_bytes,
                                                   ps.config.stall_s)
            except BaseException:
                self.sock.close(0)
                self.gate.stop()
                frameguard.remove_ipc(self._ipc_dir)
                raise
            self.endpoint = self.guard.endpoint
        elif bind.endswith(":0"):
            _heartbeats(self.sock, stall_ms)
            port = self.sock.bind_to_random_port(bind[: bind.rindex(":")])
            self.endpoint = f"{bind[: bind.rindex(':')]}:{port}"
        else:
            _heartbeats(self.sock, stall_ms)
            self.sock.bind(bind)
            self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        ps.hooks.send = self._send_held   # replies held by round-based rules leave from the serve thread
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None
        self._dropped_bytes = 0   # bytes of the last message refused for its frame count
        self._refused_seen = 0    # the gate's refusals already in an event

    def serve(self) -> None:
        """Run the loop in the calling thread until stop()."""
        ps, recv, send, poll = self.ps, self._recv, self._send, zmq.zmq_poll
        items = [(self.sock, zmq.POLLIN)]
        next_sweep = next_look = time.monotonic() + SWEEP_EVERY
        try:
            while not self._stop.is_set():
                ready = poll(items, 100)
                with ps.lock:
                    if ready:
                        for _ in range(BATCH):
                            try:
                                peer, body, principal = recv()
                            except zmq.Again:
                                break
                            if type(body) is int:   # too many frames: body is how many there were
                                reply = ps.refuse(peer, "frame-count", f"{body} frames; a message has "
                                                  f"at most {wire.MAX_FRAMES}", self._dropped_bytes)
                            else:
                                reply = ps.process(peer, body, principal)
                            if reply is not None:   # at once: the device computes while we go on
                                send(peer, reply)
                    ps.tick()   # held replies after a stop or a silent round member
                    if (self._in_flight or ps.busy_peers) and (now := time.monotonic()) >= next_sweep:
                        next_sweep = now + SWEEP_EVERY
                        self._sweep()
                    if (now := time.monotonic()) >= next_look:
                        next_look = now + SWEEP_EVERY
                        self._look_at_cap()
        except BaseException as err:  # surfaced to the engine, which ends the run cleanly
            self.error = err
            raise
        finally:
            self._close()

    def _close(self) -> None:
        """The guard, the socket and the gate, in that order (peers first lose the way in)."""
        if self.guard is not None:
            self.guard.stop()
        self.sock.close(0)
        self.gate.stop()
        if self._ipc_dir is not None:
            frameguard.remove_ipc(self._ipc_dir)

    def _recv(self) -> tuple[bytes, list | int, Optional[int]]:
        """One message: (peer, frames, device of its CURVE key or None). At most MAX_FRAMES frames are
        kept; a message with more is received and freed frame by frame and comes back as its frame count
        (an int) instead of its frames, to be refused with the real count."""
        sock = self.sock
        first = sock.recv(zmq.NOBLOCK, copy=False)
        principal = None
        if self.device_of is not None:   # an unknown key never gets here: ZAP refused its handshake
            principal = self.device_of.get(first.get("User-Id"))
        body, more = [], first.more
        while more and len(body) <= wire.MAX_FRAMES:
            frame = sock.recv(copy=False)
            more = frame.more
            body.append(frame.buffer)
        if more:
            self._dropped_bytes = wire.frames_nbytes(body)
            return first.bytes, len(body) + self._discard_rest(), principal
        return first.bytes, body, principal

    def _discard_rest(self) -> int:
        """Receive and free the rest of a message that has too many frames, without ``ps.lock`` (held
        by ``serve`` for the batch) and, where ``_discard.c`` is built, without the GIL: a million
        frames take 0.5 s in C, 1.8 s in Python (ps/discard.py); the engine must not wait for them.
        → how many frames were dropped (their bytes are added to ``_dropped_bytes``)."""
        lock = self.ps.lock
        lock.release()
        try:
            dropped, nbytes = discard_rest(self.sock)
        finally:
            lock.acquire()
        self._dropped_bytes += nbytes
        if dropped > 10_000:   # libzmq queued them all (~64 B each); give that memory back to the OS
            _malloc_trim()
        return dropped

    def _send(self, peer: bytes, frames: list) -> None:
        """Send without blocking; a full queue (peer not reading) or a vanished peer drops the reply."""
        send, last = self.sock.send, len(frames) - 1
        try:
            # Frame by frame, not send_multipart (its checks cost 1.6 µs a reply): headers copied,
            # arrays zero-copy. ROUTER refuses a message at its first frame (identity), or never.
            send(peer, _MORE)
            for i, frame in enumerate(frames):
                if i == last and type(frame) is not bytes:   # a model: tracked until ZeroMQ lets it go
                    tracker = send(frame, zmq.NOBLOCK, copy=False, track=True)
                    self._in_flight.setdefault(peer, []).append(tracker)
                else:
                    send(frame, zmq.NOBLOCK if i == last else _MORE, copy=type(frame) is bytes)
        except zmq.Again:
            self.ps.busy_peers.add(peer)
            self.ps.errors["unread-reply"] = self.ps.errors.get("unread-reply", 0) + 1
            self.ps.unsent(peer, frames)
            return
        except zmq.ZMQError as err:
            if err.errno != zmq.EHOSTUNREACH:
                raise
            self.ps.busy_peers.discard(peer)
            self.ps.errors["peer-gone"] = self.ps.errors.get("peer-gone", 0) + 1
            self.ps.unsent(peer, frames)
            return
        self.ps.busy_peers.discard(peer)

    def _send_held(self, peer: bytes, frames: list) -> None:
        self._send(peer, frames)

    def _look_at_cap(self) -> None:
        """While the connection cap refuses anyone, an event says so at least every SWEEP_EVERY s
        (``refused-at-cap``: the fidelity verdict counts the devices it kept out, emulator/kept_out.py)."""
        gate = self.gate.state()
        if gate["refused"] > self._refused_seen:
            self.ps.event(-1, "refused-at-cap", f"refused={gate['refused'] - self._refused_seen} "
                          f"total={gate['refused']} cap={gate['max_peers']} in_use={gate['in_use']}; "
                          "new connections (devices joining) get no answer until one closes")
            self._refused_seen = gate["refused"]

    def _models_in_flight(self, peer: bytes) -> int:
        """Models sent to ``peer`` that ZeroMQ still holds (queued, or being written to a peer that
        doesn't read). The PS answers a pull with ``busy`` at MAX_MODELS_IN_FLIGHT (ps/server.py)."""
        trackers = self._in_flight.get(peer)
        if not trackers:
            return 0
        trackers[:] = [t for t in trackers if not t.done]
        if not trackers:
            del self._in_flight[peer]
        return len(trackers)

    def _sweep(self) -> None:
        """Forget the models ZeroMQ let go of (delivered, or dropped with a closed connection); give the
        memory of many back to the OS (glibc keeps freed heap otherwise: 589 MiB after a flood closed)."""
        freed = 0
        for peer in list(self._in_flight):
            before = len(self._in_flight[peer])
            freed += before - self._models_in_flight(peer)
        self.ps.busy_peers.intersection_update(self._in_flight)   # peers gone or drained: no longer busy
        if freed >= SWEEP_TRIM_MODELS:
            _malloc_trim()

    def start(self) -> "ZmqServer":
        self._thread = threading.Thread(target=self.serve, name="ps-serve", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        else:   # never started: what serve() closes at its end
            self._close()
        if self._own_ctx and not self.alive and not self.gate.alive:   # no thread uses a socket of it
            self.ctx.destroy(linger=0)
        gate = self.gate.state()
        if gate["refused"]:   # in the run's events: how many connections the cap turned away
            self.ps.event(-1, "connections", f"{gate['refused']} refused at the cap of {gate['max_peers']}; "
                           f"at most {gate['peak']} in use")
        if gate["shed"]:   # raw connections beyond the descriptor budget (ps/fdbudget.py)
            self.ps.event(-1, "connections", f"{gate['shed']} shut down at accept: the PS held as many as "
                           f"its descriptor budget allows (limit {gate['fd_limit']})")
        if self.guard is not None:
            self._guard_events(self.guard.stats())

    def _guard_events(self, g: dict) -> None:
        """What the frame guard cut or shed, in the run's events (and ``ps.errors``)."""
        cut = {"cut_frames": f"a message of more than {frameguard.CUT_FRAMES} frames",
               "cut_bytes": f"a message of more than {self.ps.config.max_message_bytes:,} bytes",
               "cut_protocol": "not ZMTP 3 (greeting or frame header)",
               "cut_slow": f"no ZMTP greeting within {frameguard.HANDSHAKE_S:g} s",
               "cut_stalled": f"stalled {self.guard.stall_s:g} s (security.stall_timeout): owed the rest of "
                              "a message, or its first, and sent no byte; or its handshake unanswered (the cap)"}
        for key, why in cut.items():
            if g[key]:
                self.ps.errors[key.replace("_", "-")] = g[key]
                self.ps.event(-1, "connections", f"{g[key]} cut by the frame guard: {why}")
        if g["shed"]:
            self.ps.event(-1, "connections", f"{g['shed']} closed at accept by the frame guard: the PS held as "
                           f"many as its descriptor budget allows (limit {self.guard.fds.limit})")

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
