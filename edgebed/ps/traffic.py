"""TrafficMeter: the one place where PS traffic is counted (bytes in/out per message type, device, class)."""
from __future__ import annotations

import threading
from collections import defaultdict


class TrafficMeter:
    """Payload bytes of every message the PS receives (ingress) and sends (egress).

    Payload = the message's frames as handed to/from ZeroMQ (header + arrays), without ZMTP and
    TCP/IP framing; the Docker runtime reads on-the-wire bytes from the kernel separately.
    Written by the PS thread only; ``to_dict`` may be called from any thread (the engine's): it and
    the writers hold ``_lock``, so it never iterates a dict the PS thread is growing."""

    def __init__(self, class_of_device=None):
        self.class_of_device = class_of_device or (lambda d: "")
        self.ingress_bytes = 0
        self.egress_bytes = 0
        self.push_bytes = 0
        self.messages_in = 0
        self.rejected = 0
        self.by_kind = defaultdict(lambda: {"in_bytes": 0, "in_msgs": 0, "out_bytes": 0, "out_msgs": 0})
        self.by_device = defaultdict(lambda: {"in_bytes": 0, "out_bytes": 0, "push_bytes": 0, "pushes": 0})
        self._lock = threading.Lock()

    def received(self, kind: str, nbytes: int, device: int | None) -> None:
        with self._lock:
            self._received(kind, nbytes, device)

    def _received(self, kind: str, nbytes: int, device: int | None) -> None:
        self.ingress_bytes += nbytes
        self.messages_in += 1
        k = self.by_kind[kind]
        k["in_bytes"] += nbytes
        k["in_msgs"] += 1
        if kind == "push":
            self.push_bytes += nbytes
        if device is not None:
            d = self.by_device[device]
            d["in_bytes"] += nbytes
            if kind == "push":
                d["push_bytes"] += nbytes
                d["pushes"] += 1

    def sent(self, kind: str, nbytes: int, device: int | None) -> None:
        with self._lock:
            self.egress_bytes += nbytes
            k = self.by_kind[kind]
            k["out_bytes"] += nbytes
            k["out_msgs"] += 1
            if device is not None:
                self.by_device[device]["out_bytes"] += nbytes

    def to_dict(self) -> dict:
        with self._lock:
            return self._to_dict()

    def _to_dict(self) -> dict:
        by_class: dict[str, dict] = defaultdict(lambda: {"in_bytes": 0, "out_bytes": 0, "push_bytes": 0, "pushes": 0})
        for dev, d in self.by_device.items():
            c = by_class[self.class_of_device(dev)]
            for key in c:
                c[key] += d[key]
        return {
            "unit": "bytes (message payload: header + array frames)",
            "ingress_bytes": self.ingress_bytes, "egress_bytes": self.egress_bytes,
            "push_bytes": self.push_bytes, "messages_in": self.messages_in, "rejected": self.rejected,
            "by_kind": {k: dict(v) for k, v in self.by_kind.items()},
            "by_class": dict(by_class),
            "by_device": {str(k): dict(v) for k, v in sorted(self.by_device.items())},
        }
