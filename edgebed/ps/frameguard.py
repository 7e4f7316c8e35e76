"""FrameGuard: the PS's public TCP endpoint, a relay that cuts a peer at the first frame beyond the bound.

libzmq assembles a multipart message whole before the PS can read it, and no socket option bounds
a message's frames (``ZMQ_MAXMSGSIZE`` bounds each frame): four messages of a million empty frames
(2 MB each on the wire, ~64 MB each in libzmq's queue) held the PS's serve loop for seconds and cut
honest devices to 0.29× their rate (issue 36). The guard (``_frameguard.c``, one thread with the GIL
let go) listens where the PS used to, opens one connection to the PS's socket per peer — on a Unix
socket in a private (0700) directory — and relays bytes both ways, reading the ZMTP frame headers of
what the peer sends. At a message's ``CUT_FRAMES`` + 1-th frame, or the frame that takes it past the
PS's ``max_message_bytes``, it closes both connections: libzmq drops the incomplete message and never
sees the rest, so the flood costs the sender a connection, not the run its time. A message of
``wire.MAX_FRAMES`` + 1 to ``CUT_FRAMES`` frames still reaches the PS, which refuses it ``frame-count``
as before (a reply that tells a faulty client why; at most 16 kB of libzmq's queue and tens of µs).

What it does not change: the PS still sees one connection per peer (its cap and ZAP count them as
before; ZAP's address is the Unix socket's), CURVE handshakes pass through untouched, and a stream
whose mechanism is CURVE is relayed unparsed — its frames are encrypted and their MORE flags are
inside the box — so in a CURVE run only the PS's own refusal (ps/serve.py) bounds an authenticated
device's frames. A peer must greet with a ZMTP 3.x signature (every libzmq ≥ 4.0 does) within
``HANDSHAKE_S``; raw connections wait in the guard at one descriptor each, accepted only while the
process's descriptor budget (ps/fdbudget.py) holds three per relayed connection and one per waiting
one. ``FAST``: built (Linux with a C compiler); otherwise the PS binds its endpoint itself, unguarded.

Stalls (issue 51): a relayed peer that owes bytes — a frame or a message begun, or its first message
since the connection opened — and sent none for ``stall_s`` is cut (``cut_stalled``), so connections
that stop mid-frame cannot hold the PS's connection cap. It is a time-out on progress, not on a
message's duration: an honest device pushing a big model over a slow link sends bytes all along. A
peer between two messages owes nothing and is never cut (a device computes between its requests). A
connection whose handshake the PS has not ended ``stall_s`` after the accept (refused at the cap:
libzmq keeps it, and it counts against the cap, for its 30 s handshake time-out) is cut too; a
refused device's libzmq then reconnects and asks again.
A peer's data frames sent before the PS's handshake ended (READY) are held and judged, not relayed:
libzmq would reset the connection for them and the guard never see, nor count, a flood among them.
Without the guard the PS's socket sends ZMTP heartbeats instead (ps/serve.py), which libzmq judges
by whole frames: there a frame or a model that takes longer than ``stall_s`` to cross is cut too.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
from typing import Optional

from .fdbudget import FdBudget

try:
    from . import _frameguard as _c
except ImportError:   # no C compiler at install, or not Linux
    _c = None

FAST = _c is not None and os.environ.get("EDGEBED_FRAME_GUARD") != "off"
CUT_FRAMES = 256     # frames of a message beyond which the connection is cut (honest ones have ≤ wire.MAX_FRAMES)
HANDSHAKE_S = 10.0   # s a peer has to send its ZMTP signature
TICK_MS = 250        # the relay returns to Python this often: stop, descriptor budget
STATS = ("paired", "pending", "accepted", "shed", "cut_frames", "cut_bytes", "cut_protocol", "cut_slow",
         "opaque", "ps_unreachable", "cut_stalled")


def guardable(bind: str) -> Optional[tuple[str, int]]:
    """(host, port) of an IPv4 ``tcp://host:port`` endpoint the guard can listen on; None otherwise
    (ipc://, names, IPv6: the PS binds those itself)."""
    if not bind.startswith("tcp://") or ":" not in bind[6:]:
        return None
    host, port = bind[6:].rsplit(":", 1)
    host = "0.0.0.0" if host == "*" else host
    try:
        socket.inet_aton(host)
        return (host, int(port)) if host.count(".") == 3 else None
    except (OSError, ValueError):
        return None


class FrameGuard:
    """Listens on ``(host, port)`` (0: any free port; ``endpoint`` says which) and relays to ``ps_path``."""

    def __init__(self, host: str, port: int, ps_path: str, max_frames: int, max_bytes: int,
                 stall_s: float):
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self._listener.listen(socket.SOMAXCONN)
        self._listener.setblocking(False)
        self.endpoint = f"tcp://{host}:{self._listener.getsockname()[1]}"
        self.max_frames, self.max_bytes, self.stall_s = max_frames, max_bytes, stall_s
        self.fds = FdBudget()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)   # stop() ends a tick at once
        self._h = _c.new(self._listener.fileno(), self._wake_r, ps_path, max_frames, max_bytes, self.fds.allowed(0),
                         HANDSHAKE_S * 1e3, stall_s * 1e3)
        self._stats = dict.fromkeys(STATS, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ps-guard", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                _c.run(self._h, TICK_MS)
                self._stats = dict(zip(STATS, _c.stats(self._h)))
                held = 3 * self._stats["paired"] + self._stats["pending"]
                _c.set_cap(self._h, self.fds.allowed(held))   # descriptors connections may hold
        except Exception as err:   # never silently: a dead guard leaves the PS unreachable
            print(f"edgebed: the PS's frame guard failed: {err!r}", file=sys.stderr)
            raise

    def stats(self) -> dict:
        """Counters as of the guard's last tick (≤ TICK_MS old): connections relayed now (paired) and
        waiting for a signature (pending), accepted, shed for the descriptor budget, cut for frames,
        bytes, a bad greeting or frame (protocol), no signature in time (slow) or no byte for
        ``stall_s`` while owing some (stalled), relayed unparsed (opaque: CURVE)."""
        return dict(self._stats)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop relaying and close every connection (at once: the wake pipe ends the relay's tick). A
        second call does nothing more (the pipe's descriptors, once closed, may name other files)."""
        if self._h is None:
            return
        self._stop.set()
        os.write(self._wake_w, b"x")
        self._thread.join(2 + TICK_MS / 1e3)
        if not self._thread.is_alive():
            self._stats = dict(zip(STATS, _c.stats(self._h)))
            self._h = None   # the capsule's destructor closes the relayed connections
            os.close(self._wake_r)   # (a relay still running keeps its descriptors: it may yet use them)
            os.close(self._wake_w)
        self._listener.close()


def private_ipc() -> tuple[str, str]:
    """A Unix socket path in a new 0700 directory for the PS behind the guard: → (directory, path)."""
    d = tempfile.mkdtemp(prefix="edgebed-ps-")
    return d, os.path.join(d, "ps")


def remove_ipc(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)
