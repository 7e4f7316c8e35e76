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
        self.unsent_bytes = 0    # replies dropped by the transport (never sent): not in egress_bytes
        self.unsent_msgs = 0
        # of push_bytes: the running statistics averaging rules carry in Θ (model.buffers average),
        # 4 bytes an entry; shown apart from the weights' bytes (0 and left out for other models)
        self.statistics_bytes = 0
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

    def statistics(self, nbytes: int) -> None:
        """Bytes of running statistics within a push already counted by ``received`` (shown apart)."""
        with self._lock:
            self.statistics_bytes += nbytes

    def sent(self, kind: str, nbytes: int, device: int | None) -> None:
        with self._lock:
            self.egress_bytes += nbytes
            k = self.by_kind[kind]
            k["out_bytes"] += nbytes
            k["out_msgs"] += 1
            if device is not None:
                self.by_device[device]["out_bytes"] += nbytes

    def unsent(self, kind: str, nbytes: int, device: int | None) -> None:
        """A reply counted by ``sent`` that the transport then dropped (unread, or its peer gone)."""
        with self._lock:
            self.egress_bytes -= nbytes
            self.unsent_bytes += nbytes
            self.unsent_msgs += 1
            k = self.by_kind[kind]
            k["out_bytes"] -= nbytes
            k["out_msgs"] -= 1
            if device is not None:
                self.by_device[device]["out_bytes"] -= nbytes

    _TOTALS = ("ingress_bytes", "egress_bytes", "push_bytes", "messages_in", "rejected", "unsent_bytes",
               "unsent_msgs")

    def state(self) -> dict:
        """Every counter, JSON-ready (device keys as strings; copies): what a checkpoint keeps."""
        with self._lock:
            return self._state()

    def _state(self) -> dict:
        return {**{key: getattr(self, key) for key in self._TOTALS},
                **({"statistics_bytes": self.statistics_bytes} if self.statistics_bytes else {}),
                "by_kind": {k: dict(v) for k, v in self.by_kind.items()},
                "by_device": {str(k): dict(v) for k, v in sorted(self.by_device.items())}}

    def load_state(self, state: dict) -> None:
        """Restore the counters ``state()`` returned (a resumed PS keeps counting from there)."""
        with self._lock:
            for key in self._TOTALS:
                setattr(self, key, int(state.get(key, 0)))   # checkpoints before unsent_* lack them
            self.statistics_bytes = int(state.get("statistics_bytes", 0))
            self.by_kind.clear()
            self.by_kind.update({k: dict(v) for k, v in state["by_kind"].items()})
            self.by_device.clear()
            self.by_device.update({int(k): dict(v) for k, v in state["by_device"].items()})

    def to_dict(self) -> dict:
        """traffic.json: the counters, the unit and per-class sums."""
        with self._lock:
            return self._to_dict()

    def _to_dict(self) -> dict:
        by_class: dict[str, dict] = defaultdict(lambda: {"in_bytes": 0, "out_bytes": 0, "push_bytes": 0, "pushes": 0})
        for dev, d in self.by_device.items():
            c = by_class[self.class_of_device(dev)]
            for key in c:
                c[key] += d[key]
        state = self._state()
        by_device = state.pop("by_device")
        return {"unit": "bytes (message payload: header + array frames)", **state,
                "by_class": dict(by_class), "by_device": by_device}
