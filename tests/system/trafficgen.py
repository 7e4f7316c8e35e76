"""Tiny TCP traffic generator for the link-shaping tests (stdlib only, runs inside containers too).

    python trafficgen.py server PORT [--netns NAME]     prints one JSON line when the client is done:
                                                         {"bytes": .., "rate_bps": goodput after warm-up}
    python trafficgen.py client HOST PORT SECONDS [--netns NAME]

Goodput is measured at the receiver over [warm-up, end] so the token bucket's initial burst and TCP's
slow start don't count. Times are the kernel's receive timestamps (SO_TIMESTAMPNS) where the kernel
gives them, so a receiver that the scheduler runs late (a busy host) does not stretch the interval.
"""
import json
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)   # Linux value; the constant is missing in 3.11

WARMUP = 1.0


def _enter(argv):
    if "--netns" in argv:
        i = argv.index("--netns")
        from pyroute2 import netns
        netns.setns(argv[i + 1])
        del argv[i:i + 2]
    return argv


def server(port: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    print(json.dumps({"listening": port}), flush=True)
    conn, _ = srv.accept()
    conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    total, t0, mark_bytes, mark_t = 0, None, None, None
    while True:
        data, anc, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(16))
        now = _kernel_time(anc)
        if not data:
            break
        if t0 is None:
            t0 = now
        total += len(data)
        if mark_t is None and now - t0 >= WARMUP:
            mark_t, mark_bytes = now, total
        last = now
    rate = (total - mark_bytes) * 8 / (last - mark_t) if mark_t and last > mark_t else 0.0
    print(json.dumps({"bytes": total, "rate_bps": rate, "seconds": (last - t0) if t0 else 0}), flush=True)


def _kernel_time(anc) -> float:
    """Receive time of the newest segment in this read (kernel timestamp), else now."""
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
            sec, nsec = struct.unpack("qq", raw[:16])
            return sec + nsec * 1e-9
    return time.time()


def client(host: str, port: int, seconds: float) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            s = socket.create_connection((host, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    # A small send buffer (the kernel doubles it: 64 KiB): what is queued when the time is up drains in
    # half a second at 1 mbit, not the seconds an autotuned buffer of megabytes took. Plenty for these
    # rates on a veth (4 mbit × 1 ms of RTT is 500 B).
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
    chunk = b"x" * 65536
    end = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < end:
        sent += s.send(chunk)
    s.close()
    print(json.dumps({"sent": sent}), flush=True)


if __name__ == "__main__":
    args = _enter(sys.argv[1:])
    if args[0] == "server":
        server(int(args[1]))
    else:
        client(args[1], int(args[2]), float(args[3]))
