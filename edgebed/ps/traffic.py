"""TrafficMeter: the one place where PS traffic is counted (bytes in/out per message type, device, class)."""
from __future__ import annotations

import threading
from collections import defaultdict

try:   # the compiled short path's counts (ps/_shortpath.c); optional, like the PS's other C parts
    from ._shortpath import Tally as _Tally
except ImportError:
    _Tally = None


class TrafficMeter:
    """Payload bytes of every message the PS receives (ingress) and sends (egress).

    Payload = the message's frames as handed to/from ZeroMQ (header + arrays), without ZMTP and
    TCP/IP framing; the Docker runtime reads on-the-wire bytes from the kernel separately.
    Written by the PS thread only; read from any thread (the engine's): the readers and the writers
    hold ``_lock``, so a reader never iterates a dict the PS thread is growing. The compiled short
    path counts its pushes and Acks in ``tally`` instead, without the lock (an add runs no Python
    code, so no other thread runs in the middle of it); every read folds the tally in first, under
    the lock, so what it sees is the same as if the short path had counted through ``received`` and
    ``sent``."""

    def __init__(self, class_of_device=None):
        self.class_of_device = class_of_device or (lambda d: "")
        self._ingress_bytes = 0
        self._egress_bytes = 0
        self._push_bytes = 0
        self._messages_in = 0
        self.rejected = 0
        self.unsent_bytes = 0    # replies dropped by the transport (never sent): not in egress_bytes
        self.unsent_msgs = 0
        # of push_bytes: the running statistics averaging rules carry in Θ (model.buffers average),
        # 4 bytes an entry; shown apart from the weights' bytes (0 and left out for other models)
        self.statistics_bytes = 0
        self._by_kind = defaultdict(lambda: {"in_bytes": 0, "in_msgs": 0, "out_bytes": 0, "out_msgs": 0})
        self._by_device = defaultdict(lambda: {"in_bytes": 0, "out_bytes": 0, "push_bytes": 0, "pushes": 0})
        self._lock = threading.Lock()
        # The compiled short path's pushes and Acks (ps/_shortpath.c) are counted in C, in ``tally``,
        # and folded into the counters above whenever they are read (``_fold``, under ``_lock``); so
        # those counters are read through the properties below, never directly.
        self.tally = _Tally() if _Tally is not None else None

    def _read(self, name: str):
        with self._lock:
            self._fold()
            return getattr(self, name)

    ingress_bytes = property(lambda self: self._read("_ingress_bytes"), doc="bytes of every message received")
    egress_bytes = property(lambda self: self._read("_egress_bytes"), doc="bytes of every reply sent")
    push_bytes = property(lambda self: self._read("_push_bytes"), doc="bytes of the pushes received")
    messages_in = property(lambda self: self._read("_messages_in"), doc="messages received")
    by_kind = property(lambda self: self._read("_by_kind"),
                       doc="per message type: in/out bytes and messages (the live dict: the PS thread's)")
    by_device = property(lambda self: self._read("_by_device"),
                         doc="per device: in/out bytes, push bytes, pushes (the live dict: the PS thread's)")

    def _fold(self) -> None:
        """Add the tally's counts since the last fold into the counters (under ``_lock``): pushes as
        ``_received("push", …)`` counts them, Acks as ``sent("ack", …)``."""
        took = self.tally.take() if self.tally is not None else None
        if took is None:
            return
        push_bytes, pushes, ack_bytes, acks, devices = took
        self._ingress_bytes += push_bytes
        self._messages_in += pushes
        self._push_bytes += push_bytes
        self._egress_bytes += ack_bytes
        if pushes:
            k = self._by_kind["push"]
            k["in_bytes"] += push_bytes
            k["in_msgs"] += pushes
        if acks:
            k = self._by_kind["ack"]
            k["out_bytes"] += ack_bytes
            k["out_msgs"] += acks
        for device, d_push_bytes, d_pushes, d_ack_bytes in devices:
            d = self._by_device[device]
            d["in_bytes"] += d_push_bytes
            d["push_bytes"] += d_push_bytes
            d["pushes"] += d_pushes
            d["out_bytes"] += d_ack_bytes

    def received(self, kind: str, nbytes: int, device: int | None) -> None:
        with self._lock:
            self._received(kind, nbytes, device)

    def _received(self, kind: str, nbytes: int, device: int | None) -> None:
        self._ingress_bytes += nbytes
        self._messages_in += 1
        k = self._by_kind[kind]
        k["in_bytes"] += nbytes
        k["in_msgs"] += 1
        if kind == "push":
            self._push_bytes += nbytes
        if device is not None:
            d = self._by_device[device]
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
            self._egress_bytes += nbytes
            k = self._by_kind[kind]
            k["out_bytes"] += nbytes
            k["out_msgs"] += 1
            if device is not None:
                self._by_device[device]["out_bytes"] += nbytes

    def unsent(self, kind: str, nbytes: int, device: int | None) -> None:
        """A reply counted by ``sent`` that the transport then dropped (unread, or its peer gone)."""
        with self._lock:
            self._egress_bytes -= nbytes
            self.unsent_bytes += nbytes
            self.unsent_msgs += 1
            k = self._by_kind[kind]
            k["out_bytes"] -= nbytes
            k["out_msgs"] -= 1
            if device is not None:
                self._by_device[device]["out_bytes"] -= nbytes

    _TOTALS = ("ingress_bytes", "egress_bytes", "push_bytes", "messages_in", "rejected", "unsent_bytes",
               "unsent_msgs")
    _FOLDED = ("ingress_bytes", "egress_bytes", "push_bytes", "messages_in")   # stored as _name

    def state(self) -> dict:
        """Every counter, JSON-ready (device keys as strings; copies): what a checkpoint keeps."""
        with self._lock:
            return self._state()

    def _state(self) -> dict:
        self._fold()
        return {**{key: getattr(self, f"_{key}" if key in self._FOLDED else key) for key in self._TOTALS},
                **({"statistics_bytes": self.statistics_bytes} if self.statistics_bytes else {}),
                "by_kind": {k: dict(v) for k, v in self._by_kind.items()},
                "by_device": {str(k): dict(v) for k, v in sorted(self._by_device.items())}}

    def load_state(self, state: dict) -> None:
        """Restore the counters ``state()`` returned (a resumed PS keeps counting from there)."""
        with self._lock:
            self._fold()   # what the tally held is replaced too
            for key in self._TOTALS:   # checkpoints before unsent_* lack them
                setattr(self, f"_{key}" if key in self._FOLDED else key, int(state.get(key, 0)))
            self.statistics_bytes = int(state.get("statistics_bytes", 0))
            self._by_kind.clear()
            self._by_kind.update({k: dict(v) for k, v in state["by_kind"].items()})
            self._by_device.clear()
            self._by_device.update({int(k): dict(v) for k, v in state["by_device"].items()})

    def to_dict(self) -> dict:
        """traffic.json: the counters, the unit and per-class sums."""
        with self._lock:
            return self._to_dict()

    def _to_dict(self) -> dict:
        state = self._state()   # the tally folded in first
        by_device = state.pop("by_device")
        by_class: dict[str, dict] = defaultdict(lambda: {"in_bytes": 0, "out_bytes": 0, "push_bytes": 0, "pushes": 0})
        for dev, d in self._by_device.items():
            c = by_class[self.class_of_device(dev)]
            for key in c:
                c[key] += d[key]
        return {"unit": "bytes (message payload: header + array frames)", **state,
                "by_class": dict(by_class), "by_device": by_device}
