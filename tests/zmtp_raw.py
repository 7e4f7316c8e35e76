"""A hostile ZeroMQ peer without ZeroMQ: raw ZMTP 3.0 bytes over a TCP socket (tests and benchmarks).

A message of a million frames is two bytes a frame on the wire; built once and written with one
``sendall`` it costs the sender almost nothing, so what it costs the PS is measured alone (pyzmq's
``send_multipart`` of the same message spends ~1 s of the sender's CPU on the same cores).
"""
from __future__ import annotations

import socket
import time

GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def _ready(socket_type: bytes = b"DEALER") -> bytes:
    body = b"\x05READY" + bytes([len(b"Socket-Type")]) + b"Socket-Type" + len(socket_type).to_bytes(4, "big") + socket_type
    return b"\x04" + bytes([len(body)]) + body


def frame(data: bytes, more: bool) -> bytes:
    if len(data) < 256:
        return bytes([1 if more else 0, len(data)]) + data
    return bytes([3 if more else 2]) + len(data).to_bytes(8, "big") + data


def many_frames(head: bytes, n: int) -> bytes:
    """One message: ``head`` then ``n`` − 1 empty frames, as a DEALER sends it."""
    return frame(head, True) + b"\x01\x00" * (n - 2) + b"\x00\x00"


def connect(host: str, port: int) -> socket.socket:
    """A TCP connection through its ZMTP handshake (NULL mechanism, as a DEALER): greeting and READY
    sent, the PS's READY read (libzmq resets a connection whose messages come before its ZAP answer)."""
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(GREETING + _ready())
    if not wait_for(s, b"ROUTER", 10):
        s.close()
        raise ConnectionError("the PS did not complete the handshake (its connection cap?)")
    return s


def wait_for(s: socket.socket, needle: bytes, timeout: float) -> bool:
    """Read what the PS sends until ``needle`` appears (e.g. an Error's code); False after ``timeout`` s."""
    deadline, seen = time.monotonic() + timeout, b""
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            return False
        seen = seen[-len(needle):] + chunk
        if needle in seen:
            return True
    return False
