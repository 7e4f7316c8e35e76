"""FdBudget: how many connections the PS may hold open, kept below the process's descriptor limit.

libzmq accepts every TCP connection to the PS's socket and holds its descriptor until the ZeroMQ
handshake ends, or for ``ZMQ_HANDSHAKE_IVL`` (30 s) when the peer never sends one; no socket option
bounds how many it accepts (``ZMQ_MAXSOCKETS`` counts ZeroMQ sockets, not connections). Raw
connections that never handshake thus filled a 1,024-descriptor engine and its next table write
failed "Too many open files" (issue 36). The PS runs in the engine's process, so its connections share
the run's file table: the budget is the soft ``RLIMIT_NOFILE`` less the descriptors the process holds
for everything else (tables, logs, pipes to agents, the evaluator: counted in ``/proc/self/fd`` at
most every ``RECOUNT_EVERY`` s) less a reserve (``reserve_for``) for what the run opens next. The
connection gate (ps/gate.py) sees every accepted connection's descriptor on its monitor and shuts down
(``shutdown(2)``, never ``close``: the descriptor stays libzmq's, which then closes it as a peer that
hung up) each one accepted beyond the budget, within milliseconds, so a flood costs the run nothing it
needs; the connections already in use (honest devices) are kept. ``raise_soft_limit`` lifts the soft
limit to the hard one first, which alone ends the problem where the hard limit is high (systemd's is
524,288).
"""
from __future__ import annotations

import ctypes
import os
import resource
import socket
import struct
import time
from typing import Optional

RECOUNT_EVERY = 0.5    # s between two counts of the process's open descriptors
MIN_RESERVE = 128      # descriptors always left to the run (tables, checkpoints, logs, new agents)


def raise_soft_limit() -> int:
    """Lift the soft RLIMIT_NOFILE to the hard limit (capped at 1,048,576); → the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard if hard != resource.RLIM_INFINITY else 1 << 20, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft if soft != resource.RLIM_INFINITY else want
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        return want
    except (ValueError, OSError):
        return soft


def reserve_for(limit: int) -> int:
    """Descriptors kept free for the run under a soft limit of ``limit``: an eighth, at least 128."""
    return max(MIN_RESERVE, limit // 8)


def open_descriptors() -> Optional[int]:
    """Descriptors this process holds now (None where /proc/self/fd is not there)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1   # less the one listdir itself opened
    except OSError:
        return None


class FdBudget:
    """``room(live)``: how many more connections the PS may hold, given it holds ``live`` now."""

    def __init__(self, limit: Optional[int] = None, reserve: Optional[int] = None):
        self.limit = limit if limit is not None else resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.reserve = reserve if reserve is not None else reserve_for(self.limit)
        self._others = open_descriptors() or 0   # descriptors held for anything but connections
        self._counted_at = time.monotonic()

    def allowed(self, live: int) -> int:
        """Connections the PS may hold when it holds ``live`` (descriptors recounted now and then)."""
        now = time.monotonic()
        if now - self._counted_at >= RECOUNT_EVERY:
            total = open_descriptors()
            if total is not None:
                self._others = max(0, total - live)
            self._counted_at = now
        return max(0, self.limit - self._others - self.reserve)


_libc = None


def shut(fd: int, port: int) -> bool:
    """``shutdown(fd, SHUT_RDWR)`` if ``fd`` is still a TCP socket on local ``port`` (the PS's): the
    monitor's event may come after libzmq closed that connection and the number went to another file.
    The descriptor stays libzmq's; it sees the peer hang up and closes it. → whether it was shut."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    addr = ctypes.create_string_buffer(128)
    size = ctypes.c_uint32(128)
    if _libc.getsockname(fd, addr, ctypes.byref(size)) != 0 or size.value < 4:
        return False
    family, = struct.unpack_from("H", addr.raw, 0)
    if family not in (socket.AF_INET, socket.AF_INET6) or struct.unpack_from("!H", addr.raw, 2)[0] != port:
        return False
    return _libc.shutdown(fd, socket.SHUT_RDWR) == 0
