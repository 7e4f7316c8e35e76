"""Discard the rest of a message of too many frames: in C with the GIL let go where built, else in Python.

libzmq makes a multipart message visible only once its last frame has arrived, and a socket must be
read to the end of a message before it yields the next one, from any peer: the frames of a message the
PS refuses (``frame-count``) have to be received and freed before an honest device is served again.
In Python that costs ~0.7 µs a frame with the GIL held (a million frames: 0.71 s,
docs/performance.md); ``_discard.c`` receives and frees them with libzmq's own calls, without the GIL.
The C code is handed the addresses of the functions of the libzmq pyzmq loaded (through ctypes), so it
uses the very library the socket belongs to. ``FAST`` says which path is in use;
``EDGEBED_DISCARD=python`` in the environment forces the Python loop (benchmarks/hostile_soak.py
measures both in one run).
"""
from __future__ import annotations

import ctypes
import os

import zmq

try:
    from . import _discard as _c
    from zmq.backend.cython import _zmq as _pyzmq_backend
    _lib = ctypes.CDLL(_pyzmq_backend.__file__)
    _ADDRS = tuple(ctypes.cast(getattr(_lib, name), ctypes.c_void_p).value for name in (
        "zmq_msg_init", "zmq_msg_recv", "zmq_msg_close", "zmq_msg_more", "zmq_msg_size", "zmq_errno"))
except (ImportError, OSError, AttributeError):   # no C compiler at install, or a pyzmq without these
    _c, _ADDRS = None, ()

FAST = _c is not None and os.environ.get("EDGEBED_DISCARD") != "python"


def discard_rest(sock: zmq.Socket) -> tuple[int, int]:
    """Receive and free the frames of the message ``sock`` is in the middle of (its previous frame had
    MORE set), up to and including its last. → (frames, bytes) dropped. Raises ZMQError as recv would."""
    if FAST:
        frames, nbytes, err = _c.discard_rest(sock.underlying, *_ADDRS)
        if err:
            raise zmq.ZMQError(err)
        return frames, nbytes
    frames, nbytes, more = 0, 0, True
    while more:
        frame = sock.recv(copy=False)
        more = frame.more
        nbytes += len(frame)
        frames += 1
    return frames, nbytes
