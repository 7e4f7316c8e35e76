"""Wire format of the edgebed protocol (versions 1 and 2): one header frame + raw array frames.

Every message is a ZeroMQ multipart message::

    frame 0   header: b"EB" | version (u8) | type (u8) | UTF-8 JSON object (the message's scalar fields,
              plus "arrays": [[name, dtype, [dim, ...]], ...] describing the frames that follow)
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
need the model (index range, length of a dense push, NaN/Inf) are the PS handler's. A message may have
at most ``message_cap(|Θ|)`` bytes (8 an entry + header + margin: see there), at the PS and at the
devices alike, so the limit grows with the model and no peer can send more than a model its size needs.

Version 2 (compact encodings, opt-in per scenario: ``compression.encoding: compact``) changes only
Push and Model: instead of their value/index frames they carry ONE frame ``payload`` (dtype ``|u1``)
and the header gains ``enc`` describing how it is packed (varint/bitmap indices, f32/f16/bf16/q8
values, optional zstd — ``wire/codec.py``). A v2 Model may be a delta: ``enc.b`` = the version of the
model the device holds, ``indices`` the entries that changed; the device adds the values to its copy
(``compression/downlink.py``). ``decode`` unpacks v2 into the same Push/Model fields as v1 (float32
values, uint32 indices), so nothing behind it sees the encoding. Messages without a codec are still
sent as version 1, byte for byte as before (the paper-reproduction studies' bytes stay comparable);
both versions are decoded; any other version is refused with ``bad-version``.

Edge validation (``check_frame_count``, ``check_scalar``, at the end of this module) runs inside
``decode``, before any array is touched: at most ``MAX_FRAMES`` frames, strings valid UTF-8 of bounded
length, integers in 0..2**63-1, ``loss`` a finite float64 or NaN — so nothing a peer sends can make a
later table write fail.
"""
from __future__ import annotations

import itertools
import json
import math
import operator
import re
import struct
from dataclasses import MISSING, dataclass, field, fields
from typing import Callable, ClassVar, Optional, Sequence

import numpy as np

from . import codec as _codec
from .codec import Codec
from .welcome import WelcomeConfig  # noqa: F401  (the typed form of Welcome.config)

MAGIC = b"EB"
VERSIONS = (1, 2)           # versions decoded
MAX_HEADER_BYTES = 64 * 1024
MESSAGE_MARGIN_BYTES = 1024 * 1024   # the cap's slack over the largest message a model of |Θ| entries needs
# A receiver that does not know |Θ| (a bare PSConfig) bounds a message by this; the engine and the
# agents use message_cap(|Θ|).
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
ALLOWED_DTYPES = {"<f4": np.float32, "<f2": np.float16, "<u4": np.uint32, "<i4": np.int32}
PAYLOAD_DTYPE = "|u1"       # v2's packed payload frame
# np.dtype("<f4") is the native float32 (byteorder "=") on a little-endian host: arrays decoded with it
# take numpy's fast paths (ufunc.at is 25× slower on an explicit "<f4", which compares equal).
_DTYPES = {k: np.dtype(k) for k in ALLOWED_DTYPES}
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
    LOCAL: ClassVar[tuple[str, ...]] = ()   # fields never sent as JSON scalars (v2: packed or in enc)
    PACKED: ClassVar[tuple[str, str]] = ()  # v2: (values field, indices field) packed into "payload"

    KIND: ClassVar[str] = "message"   # the lower-case class name, set once per class below

    @property
    def kind(self) -> str:
        return self.KIND


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
    config: dict = field(default_factory=dict)   # WelcomeConfig.to_dict() (JSON on the wire)


@dataclass
class Pull(Message):
    TYPE: ClassVar[int] = 3
    session: str


@dataclass
class Model(Message):
    TYPE: ClassVar[int] = 4
    ARRAYS: ClassVar[tuple[str, ...]] = ("params",)
    LOCAL: ClassVar[tuple[str, ...]] = ("indices", "base", "codec")
    PACKED: ClassVar[tuple[str, str]] = ("params", "indices")
    version: int
    params: np.ndarray
    indices: Optional[np.ndarray] = None   # v2 delta: the entries of params that changed
    base: Optional[int] = None             # v2 delta: version of the device's model it applies to
    codec: Optional[Codec] = field(default=None, repr=False, compare=False)   # send as v2 with it

    @property
    def delta(self) -> bool:
        return self.base is not None


@dataclass
class Push(Message):
    TYPE: ClassVar[int] = 5
    ARRAYS: ClassVar[tuple[str, ...]] = ("values", "indices")
    LOCAL: ClassVar[tuple[str, ...]] = ("codec", "q8")
    PACKED: ClassVar[tuple[str, str]] = ("values", "indices")
    session: str
    seq: int
    version: int
    values: np.ndarray
    indices: Optional[np.ndarray] = None  # None → dense
    loss: float = float("nan")  # training loss on the batch, for the record
    codec: Optional[Codec] = field(default=None, repr=False, compare=False)   # send as v2 with it
    q8: Optional[tuple] = field(default=None, repr=False, compare=False)      # (codes, scales, counts)

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


def _scalar_fields(cls: type[Message]) -> tuple:
    """(name, type, accepted types, is int, required) of each JSON scalar field: computed once per class, so
    decoding a message walks a tuple instead of ``dataclasses.fields`` (the PS decodes every push)."""
    out = []
    for f in fields(cls):
        if f.name in cls.ARRAYS or f.name in cls.LOCAL:
            continue
        ftype = _field_type(f)
        out.append((f.name, ftype, _SCALAR_TYPES[ftype] if ftype else None, ftype is int,
                    f.default is MISSING and f.default_factory is MISSING))
    return tuple(out)


def _field_type(f) -> Optional[type]:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    return {"int": int, "float": float, "str": str, "bool": bool, "dict": dict}.get(t)


_SCALARS = {cls: _scalar_fields(cls) for cls in MESSAGE_TYPES.values()}
_NAMES = {cls: tuple(f[0] for f in fields_) for cls, fields_ in _SCALARS.items()}
# One encoder and one scanner for every message: json.dumps(separators=...) builds a new encoder per
# call and json.loads wraps the C scanner in two regex passes — together ~2 µs of a ~25 µs push.
_JSON_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_JSON_SCAN = json.JSONDecoder().scan_once
for _cls in MESSAGE_TYPES.values():
    _cls.KIND = _cls.__name__.lower()


def encode(msg: Message) -> list:
    """Message → list of frames (bytes header, then the arrays themselves for zero-copy sending).
    A Push or Model with a ``codec`` is sent as version 2 (one packed payload frame), else version 1."""
    if msg.PACKED and getattr(msg, "codec", None) is not None:
        return _encode_v2(msg)
    fast = _FLAT.get(type(msg))
    if fast is not None:
        head = fast(msg)
        if head is not None:
            return [head]
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
    return [_header(msg, 1, specs), *arrays]


def _header(msg: Message, version: int, specs: list, **extra) -> bytes:
    scalars = {name: getattr(msg, name) for name in _NAMES[type(msg)]}
    if "loss" in scalars and scalars["loss"] != scalars["loss"]:
        scalars["loss"] = None  # JSON has no NaN
    if extra:
        scalars.update(extra)
    scalars["arrays"] = specs
    body = _JSON_ENCODE(scalars).encode()
    return _PREFIX.pack(MAGIC, version, msg.TYPE) + body


def _flat_formats(cls: type[Message]) -> dict[tuple, bytes]:
    """``_flat_header``'s formats for ``cls``: for each combination of its bool fields' values (in field
    order) the header with those spelled out and ``%d`` for each int field."""
    kinds = tuple(f[1] for f in _SCALARS[cls])
    bools = [i for i, k in enumerate(kinds) if k is bool]
    prefix = _PREFIX.pack(MAGIC, 1, cls.TYPE)
    formats = {}
    for combo in itertools.product((False, True), repeat=len(bools)):
        spelled = dict(zip(bools, combo))
        body = "".join(f'"{n}":' + (("true" if spelled[i] else "false") if i in spelled else "%d") + ","
                       for i, n in enumerate(_NAMES[cls]))
        formats[combo] = prefix + ("{" + body + '"arrays":[]}').encode()
    return formats


def _flat_header(cls: type[Message]):
    """For a message of int and bool fields only (Ack, Sync: one per push): its header by one bytes
    formatting, byte for byte what ``_header`` writes, in a fraction of the time; None (→ ``_header``)
    when a field holds anything but a plain int / bool. The bools are spelled into the format (one per
    combination of their values), the ints go through ``%d`` (an int's decimal, as JSON writes it)."""
    names = _NAMES[cls]
    kinds = tuple(f[1] for f in _SCALARS[cls])
    get = operator.attrgetter(*names)
    bools = [i for i, k in enumerate(kinds) if k is bool]
    ints = [i for i, k in enumerate(kinds) if k is int]
    formats = _flat_formats(cls)
    # attrgetter/itemgetter of one name return the value itself, of several a tuple
    as_tuple = (lambda v: (v,)) if len(names) == 1 else (lambda v: v)
    bool_key = operator.itemgetter(*bools) if len(bools) > 1 else (
        (lambda v: (v[bools[0]],)) if bools else (lambda v: ()))
    int_values = (lambda v: tuple(v[i] for i in ints)) if len(ints) > 1 else (
        operator.itemgetter(ints[0]) if ints else (lambda v: ()))

    def header(msg: Message) -> Optional[bytes]:
        values = as_tuple(get(msg))
        if tuple(map(type, values)) != kinds:
            return None
        return formats[bool_key(values)] % int_values(values)
    return header


_FLAT = {cls: _flat_header(cls) for cls in MESSAGE_TYPES.values()
         if not cls.ARRAYS and _SCALARS[cls] and all(f[1] in (int, bool) for f in _SCALARS[cls])}


def _encode_v2(msg: Message) -> list:
    vname, iname = msg.PACKED
    enc, payload = _codec.encode_update(getattr(msg, vname), getattr(msg, iname), msg.codec,
                                        getattr(msg, "q8", None))
    if getattr(msg, "base", None) is not None:
        enc["b"] = msg.base
    return [_header(msg, 2, [["payload", PAYLOAD_DTYPE, [int(payload.size)]]], enc=enc), payload]


def message_cap(entries: int) -> int:
    """The most bytes a message about a model of ``entries`` float32 entries may have (bytes).

    ``8·entries + MAX_HEADER_BYTES + MESSAGE_MARGIN_BYTES``: the largest message such a model needs is
    a sparse push naming every entry (a uint32 index + a float32 value each, 8 bytes); a dense push or
    a Model is half of it (4 bytes an entry), every compact (v2) encoding less. ``entries`` is what
    crosses the wire: every entry of the flat vector, buffers included where the layout has them. The
    PS refuses anything larger before it reads a byte (``decode``) and ZeroMQ drops a sender whose frame
    exceeds it (``ZMQ_MAXMSGSIZE``); the devices bound the models they decode by it. ResNet-50 (25.6 M
    entries): 205 MB; the paper's CNN (0.2 M): 2.8 MB."""
    if entries < 0:
        raise ValueError(f"a model has no negative number of entries ({entries})")
    return 8 * int(entries) + MAX_HEADER_BYTES + MESSAGE_MARGIN_BYTES


def frames_nbytes(frames: Sequence) -> int:
    """Bytes of a frame list as it crosses the socket (payload only, no ZMTP/TCP framing)."""
    n = 0
    for f in frames:   # a loop, not sum(genexpr): this runs twice per push
        t = type(f)
        n += len(f) if t is bytes else f.nbytes if t is memoryview or t is np.ndarray else memoryview(f).nbytes
    return n


def decode(frames: Sequence, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, nbytes: Optional[int] = None,
           admit: Optional[Callable[[type, dict], Optional[int]]] = None) -> Message:
    """Frames → Message; raises WireError (code + human message) for anything malformed, and for
    nothing else: whatever a check or a library raises on a hostile message (numpy, zstd, even
    MemoryError) becomes ``WireError("bad-message")``. ``nbytes``: ``frames_nbytes(frames)`` if the
    caller has it already. ``admit(cls, fields)``: called for a v2 Push or Model once its header is read
    and before its payload is unpacked; it raises WireError to refuse the message (the PS: an unknown
    session, so no stranger makes it unpack anything) or returns the most entries the payload may hold
    (the PS: |Θ|; None: bounded by ``max_bytes`` only)."""
    try:
        return _decode(frames, max_bytes, nbytes, admit)
    except WireError:
        raise
    except (Exception, MemoryError, RecursionError) as err:   # a check we lack must not end the receiver
        raise WireError("bad-message", f"could not decode it ({type(err).__name__}: {_clip(str(err))})") from None


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _decode(frames: Sequence, max_bytes: int, nbytes: Optional[int], admit) -> Message:
    if not frames:
        raise WireError("empty", "no frames")
    check_frame_count(frames)
    total = frames_nbytes(frames) if nbytes is None else nbytes
    if total > max_bytes:
        raise WireError("too-large", f"message of {total} bytes exceeds the limit of {max_bytes}")
    head = bytes(memoryview(frames[0]))
    if len(head) < _PREFIX.size:
        raise WireError("truncated", "header shorter than its 4-byte prefix")
    if len(head) > MAX_HEADER_BYTES:
        raise WireError("too-large", f"header of {len(head)} bytes exceeds {MAX_HEADER_BYTES}")
    fields = _push_fields(_canonical_header(head), frames)
    if fields is not None:
        return Push(*fields)
    magic, version, mtype = _PREFIX.unpack_from(head)
    if magic != MAGIC:
        raise WireError("bad-magic", "not an edgebed message")
    if version not in VERSIONS:
        raise WireError("bad-version", f"protocol version {version}; this side speaks versions "
                        f"{', '.join(map(str, VERSIONS))}: run the same edgebed version on both ends")
    cls = MESSAGE_TYPES.get(mtype)
    if cls is None:
        raise WireError("unknown-type", f"message type {mtype}")
    try:
        meta = _json_object(head[_PREFIX.size:].decode())
    except (ValueError, RecursionError) as err:  # bad UTF-8/JSON, ints over 4300 digits, deep nesting
        raise WireError("bad-header", f"header is not JSON: {err}") from None
    if not isinstance(meta, dict):
        raise WireError("bad-header", "header JSON must be an object")
    specs = meta.pop("arrays", [])
    packed = version == 2 and bool(cls.PACKED)
    enc = meta.pop("enc", None) if packed else None
    if not packed:
        arrays = _decode_arrays(cls, specs, frames[1:], max_bytes)
    kwargs = {}
    for name, ftype, accepted, is_int, required in _SCALARS[cls]:
        value = meta.pop(name, _ABSENT)
        if value is _ABSENT:
            if not required:
                continue
            raise WireError("missing-field", f"{cls.__name__.lower()} needs field {name!r}")
        # The common cases in place (what check_scalar would accept unchanged): a plain int in range,
        # a short ASCII string. Everything else takes the full checks below.
        t = type(value)
        if (t is int and is_int and 0 <= value <= MAX_INT) or (
                t is str and ftype is str and len(value) <= MAX_STRING and value.isascii()):
            kwargs[name] = value
            continue
        if name == "loss" and value is None:
            value = float("nan")
        if accepted is not None and not (isinstance(value, accepted) and not (is_int and isinstance(value, bool))):
            raise WireError("bad-field", f"{cls.__name__.lower()}.{name} must be {accepted[-1].__name__}")
        kwargs[name] = check_scalar(cls, name, ftype, value)
    if meta:
        raise WireError("bad-field", f"unknown fields {sorted(meta)} in {cls.__name__.lower()}")
    if packed:   # the scalars are checked; ask whether this sender may make us unpack anything
        max_entries = admit(cls, kwargs) if admit is not None else None
        arrays = _decode_packed(cls, enc, specs, frames[1:], max_bytes, max_entries)
    kwargs.update(arrays)
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise WireError("missing-field", str(err)) from None


_ABSENT = object()   # a header field that is not there

# The header of every v1 push an edgebed device sends, byte for byte as ``encode`` writes it, is
# read by one regular expression (or edgebed/wire/_pushhead.c, which it specifies) instead of the JSON scanner and the generic field and array checks
# (4.5 → 2.3 µs a push, benchmarks/results/ps-process-parts.json as of commit d9dfe8e and now). It only matches what the generic path accepts
# — a plain session id, ints of at most 18 digits, a loss of at most 20 + 20 digits, the two array
# specs — and ``_push_fields`` gives the very fields the generic path would, or hands the message
# back to it (frame lengths that don't fit, an infinite loss): every refusal and its wording stay the
# generic path's. tests/unit/wire/test_wire.py checks both paths agree. None switches it off.
_NUMBER = rb"(0|[1-9][0-9]{0,17})"
_PUSH_V1: Optional[re.Pattern] = re.compile(
    MAGIC + b"\x01\x05" + rb'\{"session":"([0-9A-Za-z_-]{1,256})","seq":' + _NUMBER + rb',"version":' + _NUMBER
    + rb',"loss":(null|-?(?:0|[1-9][0-9]{0,19})(?:\.[0-9]{1,20})?(?:[eE][-+]?[0-9]{1,3})?)'
    + rb',"arrays":\[\["values","<f4",\[(0|[1-9][0-9]{0,9})\]\](?:,\["indices","<u4",\[(0|[1-9][0-9]{0,9})\]\])?\]\}')
_F4, _U4 = _DTYPES["<f4"], _DTYPES["<u4"]
try:   # the same reading, compiled (edgebed/wire/_pushhead.c); optional, like the PS's other C parts
    from . import _pushhead as _HEADER
except ImportError:
    _HEADER = None


def _canonical_header(head) -> Optional[tuple]:
    """The fields of a canonical v1 push header (``_header_fields``), or None for any other header
    (and when the shortcut is off: ``_PUSH_V1`` None). Read by the compiled ``_pushhead.push_v1``
    where it is built, else by ``_PUSH_V1``: the same fields (tests/unit/wire/test_pushhead.py)."""
    if _PUSH_V1 is None:
        return None
    if _HEADER is not None:
        return _HEADER.push_v1(head)
    m = _PUSH_V1.fullmatch(head)
    return None if m is None else _header_fields(m)


def _header_fields(m: re.Match) -> Optional[tuple]:
    """(session, seq, version, loss, values, indices | None) of a header ``_PUSH_V1`` matched, the
    last two the entries its array specs announce; None for an infinite loss (``decode``'s generic path
    then reads it and words the refusal). What the compiled ``_pushhead.push_v1`` gives for the same
    header (tests/unit/wire/test_pushhead.py)."""
    session, seq, version, loss, n_values, n_indices = m.groups()
    if loss == b"null":
        loss = math.nan
    elif loss.isdigit() or (loss[:1] == b"-" and loss[1:].isdigit()):
        loss = float(int(loss))   # a JSON integer: "-0" is 0, as json reads it
    else:
        loss = float(loss)
        if math.isinf(loss):
            return None
    return (session.decode(), int(seq), int(version), loss, int(n_values),
            None if n_indices is None else int(n_indices))


def _push_fields(header: Optional[tuple], frames: Sequence) -> Optional[tuple]:
    """(session, seq, version, values, indices, loss) of a push with these header fields
    (``_header_fields``), or None when there are none or its frames don't fit them."""
    if header is None:
        return None
    session, seq, version, loss, n_values, n_indices = header
    if len(frames) != (3 if n_indices is not None else 2):
        return None
    values = _frame_buffer(frames[1])
    if values.nbytes != 4 * n_values or not values.c_contiguous:
        return None
    indices = None
    if n_indices is not None:
        indices = _frame_buffer(frames[2])
        if indices.nbytes != 4 * n_indices or not indices.c_contiguous:
            return None
        indices = np.frombuffer(indices, dtype=_U4)
    return session, seq, version, np.frombuffer(values, dtype=_F4), indices, loss


def push_fields(frames: Sequence, max_bytes: int) -> Optional[tuple]:
    """The PS's fast path (ParameterServer._push): a push as every edgebed device sends it (version 1,
    the canonical header ``_PUSH_V1`` reads) as the tuple (session, seq, version, values, indices,
    loss, nbytes) — the fields ``decode`` would put in its Push, without building one — or None for
    any other message, which ``decode`` then reads and refuses or accepts as always
    (tests/unit/wire/test_wire.py checks both give the same fields). The header: ``_canonical_header``;
    the frames' count and sizes: the compiled ``_pushhead.push_frames`` where built (one call instead
    of ~1.5 µs of Python a push; tests/unit/wire/test_pushhead.py compares them), else here."""
    if _PUSH_V1 is None:
        return None
    if _HEADER is not None:
        fields = _HEADER.push_frames(frames, max_bytes)
        if fields is None:
            return None
        session, seq, version, loss, nbytes, _, n_indices = fields
        return (session, seq, version, np.frombuffer(frames[1], dtype=_F4),
                None if n_indices is None else np.frombuffer(frames[2], dtype=_U4), loss, nbytes)
    return _push_fields_py(frames, max_bytes)


def _push_fields_py(frames: Sequence, max_bytes: int) -> Optional[tuple]:
    """``push_fields`` without ``_pushhead.push_frames``: the same answer, in Python."""
    if not 2 <= len(frames) <= 3:
        return None
    head = frames[0]
    if not (type(head) is bytes or (type(head) is memoryview and head.c_contiguous)):   # as push_frames
        return None
    header = _canonical_header(head)
    if header is None:
        return None
    nbytes = frames_nbytes(frames)
    if nbytes > max_bytes:
        return None
    fields = _push_fields(header, frames)
    return None if fields is None else (*fields, nbytes)


_ACK_APPLIED = _flat_formats(Ack)[(True, False)]   # applied, not frozen: the header with %d for the version


def ack_applied(version: int) -> list:
    """``encode(Ack(version, applied=True))`` for the PS's fast path: the same single frame, by one
    formatting (tests/unit/wire/test_wire.py)."""
    return [_ACK_APPLIED % version]


def _json_object(text: str):
    """``json.loads(text)``, through the C scanner directly when the text is one plain JSON value (what
    every sender writes); anything else (whitespace around it, trailing data, errors) takes
    ``json.loads`` itself, so what is accepted and how it is refused do not change."""
    try:
        value, end = _JSON_SCAN(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _decode_packed(cls: type[Message], enc, specs, frames, max_bytes: int, max_entries: Optional[int]) -> dict:
    if (not isinstance(specs, list) or len(specs) != 1 or len(frames) != 1
            or specs[0] != ["payload", PAYLOAD_DTYPE, [memoryview(frames[0]).nbytes]]):
        raise WireError("bad-array", f"a v2 {cls.__name__.lower()} carries one payload frame "
                        f"[\"payload\", \"{PAYLOAD_DTYPE}\", [bytes]], header says {specs!r}")
    buf = frames[0]
    payload = np.frombuffer(memoryview(buf) if not isinstance(buf, np.ndarray) else memoryview(buf.data),
                            dtype=np.uint8)
    try:
        values, indices = _codec.decode_update(enc, payload, max_bytes, max_entries)
    except _codec.CodecError as err:
        raise WireError("bad-encoding", f"{cls.__name__.lower()}: {err}") from None
    vname, iname = cls.PACKED
    out = {vname: values, iname: indices}
    if "b" in enc:   # decode_update checked enc is a dict
        if cls is not Model or type(enc["b"]) is not int or not 0 <= enc["b"] <= MAX_INT or indices is None:
            raise WireError("bad-encoding", "enc.b (delta base) is for sparse model deltas only")
        out["base"] = enc["b"]
    return out


def _frame_buffer(frame) -> memoryview:
    """A received frame (bytes, memoryview, ZeroMQ buffer, or an ndarray handed over in-process) as
    the memoryview its array is read from."""
    return memoryview(frame) if type(frame) is not np.ndarray else memoryview(frame.data)


def _decode_arrays(cls: type[Message], specs, frames, max_bytes: int) -> dict:
    if not isinstance(specs, list) or len(specs) != len(frames):
        raise WireError("frame-count", f"header announces {len(specs) if isinstance(specs, list) else '?'} "
                        f"arrays, message has {len(frames)}")
    out = {}
    for spec, frame in zip(specs, frames):
        # `type(x) is int` rules out bools (and int subclasses) in one test: this runs for every push.
        # A 1-D shape (every push and model) is checked without the generator of the general case.
        if type(spec) is not list or len(spec) != 3 or spec[0] not in cls.ARRAYS or spec[0] in out:
            raise WireError("bad-array", f"bad array spec {spec!r} for {cls.__name__.lower()}")
        name, dt, shape = spec
        if type(shape) is list and len(shape) == 1 and type(shape[0]) is int and shape[0] >= 0:
            count = shape[0]
        elif (type(shape) is list and len(shape) <= MAX_DIMS
              and all(type(d) is int and 0 <= d <= max_bytes for d in shape)):
            # Each dimension bounded too: [0, 2**70] holds 0 bytes, but numpy can't shape it.
            count = math.prod(shape)   # Python ints: np.prod would wrap around on huge dims
        else:
            raise WireError("bad-array", f"bad array spec {spec!r} for {cls.__name__.lower()}")
        dtype = _DTYPES.get(dt) if type(dt) is str else None
        if dtype is None:
            raise WireError("bad-dtype", f"{name}: dtype {dt!r} is not one of {sorted(ALLOWED_DTYPES)}")
        buf = _frame_buffer(frame)
        if count * dtype.itemsize != buf.nbytes:
            raise WireError("bad-length", f"{name}: shape {shape} × {dtype.itemsize} B ≠ frame of {buf.nbytes} B")
        arr = np.frombuffer(buf, dtype=dtype)
        out[name] = arr if len(shape) == 1 else arr.reshape(shape)   # frombuffer is 1-D already
    if len(out) < len(cls.ARRAYS):   # only "indices" may be absent (a dense push)
        missing = [n for n in cls.ARRAYS if n not in out and n != "indices"]
        if missing:
            raise WireError("missing-array", f"{cls.__name__.lower()} needs array(s) {missing}")
    return out


# -- edge validation (kept apart from the encoding: it is about what a hostile peer may send) ------------
MAX_FRAMES = 1 + max(len(c.ARRAYS) for c in MESSAGE_TYPES.values())   # header + arrays (Push: 3)
MAX_STRING = 256                 # session ids, class names
MAX_TEXT = 4096                  # free text: Bye.reason, Error.message, Stop.reason
MAX_INT = 2 ** 63 - 1            # every int field is recorded as int64 at most
MAX_DIMS = 8                     # dimensions of an array (every array sent is 1-D)
_TEXT_FIELDS = {"reason", "message"}


def check_frame_count(frames: Sequence) -> None:
    """A message has at most MAX_FRAMES frames (transports drop the rest before allocating them)."""
    if len(frames) > MAX_FRAMES:
        raise WireError("frame-count", f"{len(frames)} frames; a message has at most {MAX_FRAMES}")


def check_scalar(cls: type[Message], name: str, ftype: Optional[type], value):
    """One header field as the receiver may use it (returned, possibly normalised), or WireError."""
    if ftype is str:
        limit = MAX_TEXT if name in _TEXT_FIELDS else MAX_STRING
        if len(value) > limit:
            raise WireError("bad-field", f"{_where(cls, name)}: {len(value)} characters, at most {limit}")
        if not value.isascii():   # ASCII (every session id) is valid UTF-8: skip the encode
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:   # a lone surrogate (\\ud800) decodes from JSON but is no text
                raise WireError("bad-field", f"{_where(cls, name)} is not valid UTF-8 text") from None
    elif ftype is int:
        if not 0 <= value <= MAX_INT:
            raise WireError("bad-field", f"{_where(cls, name)} = {value} is outside 0..2**63-1")
    elif ftype is float:
        try:
            value = float(value)
        except OverflowError:
            raise WireError("bad-field", f"{_where(cls, name)} does not fit a float64") from None
        if math.isinf(value):
            raise WireError("bad-field", f"{_where(cls, name)} must be finite (or null for NaN)")
    return value


def _where(cls: type[Message], name: str) -> str:
    return f"{cls.__name__.lower()}.{name}"
