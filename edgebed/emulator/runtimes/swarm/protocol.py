"""Engine ↔ node agent messages (``agents: service``): a small, versioned, JSON-only message set.

The engine binds a ROUTER socket; each node's agent connects a DEALER whose routing id is its Swarm
node id (the same direction as the devices: nothing on a node listens). A message is two frames::

    [VERSION, json({"type": <kind>, ...fields})]

From an agent: ``hello`` (node, container, version), ``shaped`` (a device's link is in place and its
gate open; what was installed), ``report`` (its tasks' states and kernel byte counters, cumulative),
``ack`` (a request's outcome), ``error`` (it can't do its job), ``logs`` (a task's output, at the end),
``bye``. From the engine: ``setup`` (which services' slots are which devices, their speed classes,
the PS address), ``quota``, ``freeze``, ``signal`` (each with a request id answered by an ``ack``),
``ping`` (liveness) and ``bye`` (report once more, release the run's tasks on this node, end).

``decode`` is total: any frame list either becomes a ``Message`` whose fields have the documented
types or raises ``ProtocolError`` saying why; callers log and drop those. Nothing is ever unpickled.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

VERSION = b"edgebed-swarm-agent/1"
MAX_BYTES = 4 << 20          # a message larger than this is refused before parsing (logs are capped below)
LOG_TAIL = 256 * 1024        # bytes of a task's output an agent sends at the end

_int = (int,)
_num = (int, float)
# kind → {field: accepted types}; every field is required, no other field is allowed
SCHEMA: dict[str, dict[str, tuple]] = {
    # agent → engine
    "hello": {"node": (str,), "container": (str,), "version": _int},
    "shaped": {"device": _int, "entry": (dict,)},
    "report": {"t": _num, "tasks": (dict,), "counters": (dict,)},
    "ack": {"req": _int, "ok": (bool,), "error": (str,)},
    "error": {"message": (str,), "device": (int, type(None))},
    "logs": {"device": _int, "text": (str,)},
    "bye": {"reason": (str,)},
    # engine → agent
    "setup": {"services": (list,), "classes": (dict,), "ps_host": (str,), "downlink": (bool,),
              "report_every": _num},
    "quota": {"req": _int, "device": _int, "cpus": _num},
    "freeze": {"req": _int, "device": _int},
    "signal": {"req": _int, "device": _int, "sig": _int},
    "ping": {},
}
COUNTER_KEYS = ("uplink_bytes", "downlink_bytes", "uplink_packets", "downlink_packets")


class ProtocolError(ValueError):
    """A message that is not one of SCHEMA's, or whose fields have the wrong types."""


@dataclass
class Message:
    kind: str
    fields: dict = field(default_factory=dict)

    def __getitem__(self, key):
        return self.fields[key]


def encode(kind: str, **fields) -> list[bytes]:
    """The frames of one message; checked against SCHEMA like a received one."""
    msg = Message(kind, fields)
    _check(msg)
    return [VERSION, json.dumps({"type": kind, **fields}, separators=(",", ":")).encode()]


def decode(frames: list) -> Message:
    """Frames (after any routing id) → Message, or ProtocolError. Total: never another exception."""
    if not isinstance(frames, (list, tuple)) or len(frames) != 2:
        raise ProtocolError(f"expected 2 frames, got {len(frames) if isinstance(frames, (list, tuple)) else frames!r}")
    if not all(isinstance(f, (bytes, bytearray, memoryview)) for f in frames):
        raise ProtocolError("frames must be bytes")
    version, body = frames
    if bytes(version) != VERSION:
        raise ProtocolError(f"version {bytes(version)[:40]!r}, expected {VERSION!r}")
    body = bytes(body)
    if len(body) > MAX_BYTES:
        raise ProtocolError(f"message of {len(body)} bytes (max {MAX_BYTES})")
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise ProtocolError(f"not JSON: {err}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ProtocolError("not an object with a string 'type'")
    kind = obj.pop("type")
    msg = Message(kind, obj)
    _check(msg)
    return msg


def _check(msg: Message) -> None:
    spec = SCHEMA.get(msg.kind)
    if spec is None:
        raise ProtocolError(f"unknown message type {msg.kind!r}")
    missing = set(spec) - set(msg.fields)
    extra = set(msg.fields) - set(spec)
    if missing or extra:
        raise ProtocolError(f"{msg.kind}: missing {sorted(missing)}, unexpected {sorted(extra)}")
    for k, types in spec.items():
        v = msg.fields[k]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise ProtocolError(f"{msg.kind}.{k}: {type(v).__name__} is not {'/'.join(t.__name__ for t in types)}")
    if msg.kind == "report":
        msg.fields["tasks"] = _per_device(msg.fields["tasks"], _task_state, "report.tasks")
        msg.fields["counters"] = _per_device(msg.fields["counters"], _counter, "report.counters")


def _per_device(d: dict, check, where: str) -> dict[int, dict]:
    out = {}
    for k, v in d.items():
        try:
            dev = int(k)
        except ValueError:
            raise ProtocolError(f"{where}: device key {k!r} is not an integer") from None
        if not isinstance(v, dict):
            raise ProtocolError(f"{where}[{k}]: not an object")
        out[dev] = check(v, f"{where}[{k}]")
    return out


def _task_state(v: dict, where: str) -> dict:
    if not isinstance(v.get("state"), str) or not isinstance(v.get("exit_code"), (int, type(None))) \
            or isinstance(v.get("exit_code"), bool):
        raise ProtocolError(f"{where}: needs state (string) and exit_code (integer or null)")
    return {"state": v["state"], "exit_code": v["exit_code"]}


def _counter(v: dict, where: str) -> dict:
    if set(v) != set(COUNTER_KEYS) or any(not isinstance(x, int) or isinstance(x, bool) or x < 0
                                          for x in v.values()):
        raise ProtocolError(f"{where}: needs non-negative integers {', '.join(COUNTER_KEYS)}")
    return dict(v)
