"""Wire format of the edgebed protocol (version 1): one header frame + raw array frames.

Every message is a ZeroMQ multipart message::

    frame 0   header: b"EB" | version (u8) | type (u8) | UTF-8 JSON object (the message's scalar fields,
              plus "arrays": [[dtype, [dim, ...]], ...] describing the frames that follow)
    frame 1.. one frame per array, raw little-endian bytes, C order, exactly prod(shape)*itemsize long

The ROUTER socket at the PS adds the peer identity frame in front; transports strip it. Arrays are
sent zero-copy and received as read-only numpy views on the frame buffers. No pickle, ever: the JSON
only holds ints, floats, strings, bools and small dicts (the run configuration in ``Welcome``).

Conversation (agent = DEALER, PS = ROUTER)::

    Hello(device, speed_class, attempt)  → Welcome(session, config)   | Error
    Pull(session)                        → Model(version, params)     | Stop | Error
    Push(session, seq, version, ...)     → Ack(version, applied, freeze) | Sync(version) | Stop | Error
    Heartbeat(session)                   → Ack
    Bye(session, reason)                 → (no reply)

Round-based update rules (model averaging) may hold a Model or Ack until their round closes; Sync
answers a dynamic-averaging report whose round ends in a synchronisation (upload the model, then pull).
``Push`` is dense (``values`` has |Θ| entries) or sparse (``indices`` uint32 into the flat Θ and
``values`` of the same length). ``decode`` rejects anything malformed with ``WireError``; checks that
need the model (index range, length of a dense push, NaN/Inf) are the PS handler's.

Edge validation (``check_frame_count``, ``check_scalar``, at the end of this module) runs inside
``decode``, before any array is touched: at most ``MAX_FRAMES`` frames, strings valid UTF-8 of bounded
length, integers in 0..2**63-1, ``loss`` a finite float64 or NaN — so nothing a peer sends can make a
later table write fail.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import MISSING, dataclass, field, fields
from typing import ClassVar, Optional, Sequence

import numpy as np

MAGIC = b"EB"
VERSION = 1
MAX_HEADER_BYTES = 64 * 1024
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
ALLOWED_DTYPES = {"<f4": np.float32, "<f2": np.float16, "<u4": np.uint32, "<i4": np.int32}
_PREFIX = struct.Struct("<2sBB")


class WireError(ValueError):
    """A frame sequence that is not a valid message; ``code`` goes into the Error reply."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass
class Message:
    TYPE: ClassVar[int] = 0
    ARRAYS: ClassVar[tuple[str, ...]] = ()  # names of the ndarray fields, in frame order

    @property
    def kind(self) -> str:
        return type(self).__name__.lower()


@dataclass
class Hello(Message):
    TYPE: ClassVar[int] = 1
    device: int
    speed_class: str = ""
    attempt: int = 0


@dataclass
class Welcome(Message):
    TYPE: ClassVar[int] = 2
    session: str
    config: dict = field(default_factory=dict)


@dataclass
class Pull(Message):
    TYPE: ClassVar[int] = 3
    session: str


@dataclass
class Model(Message):
    TYPE: ClassVar[int] = 4
    ARRAYS: ClassVar[tuple[str, ...]] = ("params",)
    version: int
    params: np.ndarray


@dataclass
class Push(Message):
    TYPE: ClassVar[int] = 5
    ARRAYS: ClassVar[tuple[str, ...]] = ("values", "indices")
    session: str
    seq: int
    version: int
    values: np.ndarray
    indices: Optional[np.ndarray] = None  # None → dense
    loss: float = float("nan")  # training loss on the batch, for the record

    @property
    def sparse(self) -> bool:
        return self.indices is not None


@dataclass
class Ack(Message):
    TYPE: ClassVar[int] = 6
    version: int
    applied: bool = True
    freeze: bool = False  # the PS drew a fail-stop crash for this device: never send again


@dataclass
class Stop(Message):
    TYPE: ClassVar[int] = 7
    reason: str = "run over"


@dataclass
class Bye(Message):
    TYPE: ClassVar[int] = 8
    session: str
    reason: str = ""


@dataclass
class Heartbeat(Message):
    TYPE: ClassVar[int] = 9
    session: str


@dataclass
class Error(Message):
    TYPE: ClassVar[int] = 10
    code: str
    message: str = ""


@dataclass
class Sync(Message):
    TYPE: ClassVar[int] = 11
    version: int


MESSAGE_TYPES: dict[int, type[Message]] = {
    cls.TYPE: cls for cls in (Hello, Welcome, Pull, Model, Push, Ack, Stop, Bye, Heartbeat, Error, Sync)
}
_SCALAR_TYPES = {int: (int,), float: (int, float), str: (str,), bool: (bool,), dict: (dict,)}


def encode(msg: Message) -> list:
    """Message → list of frames (bytes header, then the arrays themselves for zero-copy sending)."""
    arrays, specs = [], []
    for name in msg.ARRAYS:
        arr = getattr(msg, name)
        if arr is None:
            continue
        arr = np.ascontiguousarray(arr)
        dt = arr.dtype.newbyteorder("<").str if arr.dtype.byteorder == "=" else arr.dtype.str
        if dt not in ALLOWED_DTYPES:
            raise WireError("bad-dtype", f"{msg.kind}.{name}: dtype {dt} is not one of {sorted(ALLOWED_DTYPES)}")
        arrays.append(arr)
        specs.append([name, dt, list(arr.shape)])
    scalars = {f.name: getattr(msg, f.name) for f in fields(msg) if f.name not in msg.ARRAYS}
    if "loss" in scalars and scalars["loss"] != scalars["loss"]:
        scalars["loss"] = None  # JSON has no NaN
    scalars["arrays"] = specs
    body = json.dumps(scalars, separators=(",", ":")).encode()
    return [_PREFIX.pack(MAGIC, VERSION, msg.TYPE) + body, *arrays]


def frames_nbytes(frames: Sequence) -> int:
    """Bytes of a frame list as it crosses the socket (payload only, no ZMTP/TCP framing)."""
    return sum(memoryview(f).nbytes if not isinstance(f, np.ndarray) else f.nbytes for f in frames)


def decode(frames: Sequence, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> Message:
    """Frames → Message; raises WireError (code + human message) for anything malformed."""
    if not frames:
        raise WireError("empty", "no frames")
    check_frame_count(frames)
    total = frames_nbytes(frames)
    if total > max_bytes:
        raise WireError("too-large", f"message of {total} bytes exceeds the limit of {max_bytes}")
    head = bytes(memoryview(frames[0]))
    if len(head) < _PREFIX.size:
        raise WireError("truncated", "header shorter than its 4-byte prefix")
    if len(head) > MAX_HEADER_BYTES:
        raise WireError("too-large", f"header of {len(head)} bytes exceeds {MAX_HEADER_BYTES}")
    magic, version, mtype = _PREFIX.unpack_from(head)
    if magic != MAGIC:
        raise WireError("bad-magic", "not an edgebed message")
    if version != VERSION:
        raise WireError("bad-version", f"protocol version {version}, this PS speaks {VERSION}")
    cls = MESSAGE_TYPES.get(mtype)
    if cls is None:
        raise WireError("unknown-type", f"message type {mtype}")
    try:
        meta = json.loads(head[_PREFIX.size:].decode())
    except (ValueError, RecursionError) as err:  # bad UTF-8/JSON, ints over 4300 digits, deep nesting
        raise WireError("bad-header", f"header is not JSON: {err}") from None
    if not isinstance(meta, dict):
        raise WireError("bad-header", "header JSON must be an object")
    specs = meta.pop("arrays", [])
    arrays = _decode_arrays(cls, specs, frames[1:])
    kwargs = {}
    for f in fields(cls):
        if f.name in cls.ARRAYS:
            continue
        if f.name not in meta:
            if f.default is not MISSING or f.default_factory is not MISSING:
                continue
            raise WireError("missing-field", f"{cls.__name__.lower()} needs field {f.name!r}")
        value = meta.pop(f.name)
        if f.name == "loss" and value is None:
            value = float("nan")
        ftype = _field_type(f)
        if ftype is not None and not (isinstance(value, _SCALAR_TYPES[ftype])
                                      and not (ftype is int and isinstance(value, bool))):
            raise WireError("bad-field", f"{cls.__name__.lower()}.{f.name} must be {ftype.__name__}")
        kwargs[f.name] = check_scalar(cls, f.name, ftype, value)
    if meta:
        raise WireError("bad-field", f"unknown fields {sorted(meta)} in {cls.__name__.lower()}")
    kwargs.update(arrays)
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise WireError("missing-field", str(err)) from None


def _field_type(f) -> Optional[type]:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    return {"int": int, "float": float, "str": str, "bool": bool, "dict": dict}.get(t)


def _decode_arrays(cls: type[Message], specs, frames) -> dict:
    if not isinstance(specs, list) or len(specs) != len(frames):
        raise WireError("frame-count", f"header announces {len(specs) if isinstance(specs, list) else '?'} "
                        f"arrays, message has {len(frames)}")
    out = {}
    for spec, frame in zip(specs, frames):
        if (not isinstance(spec, list) or len(spec) != 3 or spec[0] not in cls.ARRAYS or spec[0] in out
                or not isinstance(spec[2], list)
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in spec[2])):
            raise WireError("bad-array", f"bad array spec {spec!r} for {cls.__name__.lower()}")
        name, dt, shape = spec
        if not isinstance(dt, str) or dt not in ALLOWED_DTYPES:
            raise WireError("bad-dtype", f"{name}: dtype {dt!r} is not one of {sorted(ALLOWED_DTYPES)}")
        dtype = np.dtype(ALLOWED_DTYPES[dt]).newbyteorder("<")
        buf = memoryview(frame) if not isinstance(frame, np.ndarray) else memoryview(frame.data)
        count = math.prod(shape)   # Python ints: np.prod would wrap around on huge dims
        if count * dtype.itemsize != buf.nbytes:
            raise WireError("bad-length", f"{name}: shape {shape} × {dtype.itemsize} B ≠ frame of {buf.nbytes} B")
        out[name] = np.frombuffer(buf, dtype=dtype).reshape(shape)
    missing = [n for n in cls.ARRAYS if n not in out and n != "indices"]
    if missing:
        raise WireError("missing-array", f"{cls.__name__.lower()} needs array(s) {missing}")
    return out


# -- edge validation (kept apart from the encoding: it is about what a hostile peer may send) ------------
MAX_FRAMES = 1 + max(len(c.ARRAYS) for c in MESSAGE_TYPES.values())   # header + arrays (Push: 3)
MAX_STRING = 256                 # session ids, class names
MAX_TEXT = 4096                  # free text: Bye.reason, Error.message, Stop.reason
MAX_INT = 2 ** 63 - 1            # every int field is recorded as int64 at most
_TEXT_FIELDS = {"reason", "message"}


def check_frame_count(frames: Sequence) -> None:
    """A message has at most MAX_FRAMES frames (transports drop the rest before allocating them)."""
    if len(frames) > MAX_FRAMES:
        raise WireError("frame-count", f"{len(frames)} frames; a message has at most {MAX_FRAMES}")


def check_scalar(cls: type[Message], name: str, ftype: Optional[type], value):
    """One header field as the receiver may use it (returned, possibly normalised), or WireError."""
    where = f"{cls.__name__.lower()}.{name}"
    if ftype is str:
        limit = MAX_TEXT if name in _TEXT_FIELDS else MAX_STRING
        if len(value) > limit:
            raise WireError("bad-field", f"{where}: {len(value)} characters, at most {limit}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:   # a lone surrogate (\\ud800) decodes from JSON but is no text
            raise WireError("bad-field", f"{where} is not valid UTF-8 text") from None
    elif ftype is int:
        if not 0 <= value <= MAX_INT:
            raise WireError("bad-field", f"{where} = {value} is outside 0..2**63-1")
    elif ftype is float:
        try:
            value = float(value)
        except OverflowError:
            raise WireError("bad-field", f"{where} does not fit a float64") from None
        if math.isinf(value):
            raise WireError("bad-field", f"{where} must be finite (or null for NaN)")
    return value
