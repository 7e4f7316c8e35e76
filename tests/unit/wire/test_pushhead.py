"""The compiled reading of a canonical push header (edgebed/wire/_pushhead.c) against its specification,
the regular expression ``wire._PUSH_V1`` and ``wire._header_fields``: the same answer (fields, or None
for "not canonical, take the general way") for every boundary of the expression and for thousands of
headers one edit away from canonical ones. And ``push_fields`` with the expression alone still gives
what ``decode`` gives (tests/unit/wire/test_wire.py checks it with the compiled reading)."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from edgebed import wire

from tests.capabilities import require


def _compiled():
    require(wire._HEADER is not None, "the compiled push-header reading (edgebed/wire/_pushhead.c)",
            "a C compiler at install time: `make setup` (pip install -e .) builds it; without one "
            "the PS reads push headers with the regular expression, same fields, slower")
    return wire._HEADER


def _expression(head: bytes):
    m = wire._PUSH_V1.fullmatch(head)
    return None if m is None else wire._header_fields(m)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a[:3] == b[:3] and a[4:] == b[4:] and repr(a[3]) == repr(b[3])   # NaN is NaN, -0.0 not 0.0


def _agree(head: bytes) -> None:
    fast, spec = _compiled().push_v1(head), _expression(head)
    assert _same(fast, spec), (head, fast, spec)


PUSH = b'EB\x01\x05{"session":"%s","seq":%s,"version":%s,"loss":%s,"arrays":[["values","<f4",[%s]]%s]}'
SPARSE = b',["indices","<u4",[%s]]'


def _head(session=b"a1", seq=b"7", version=b"3", loss=b"null", values=b"2", indices=b"2"):
    return PUSH % (session, seq, version, loss, values, b"" if indices is None else SPARSE % indices)


@pytest.mark.parametrize("field, texts", [
    ("session", [b"", b"a", b"Z" * 255, b"Z" * 256, b"Z" * 257, b"a-b_c", b"a b", b"a.b", b"\xc3\xa9", b'a"']),
    ("seq", [b"0", b"00", b"01", b"9" * 18, b"1" + b"0" * 17, b"1" * 19, b"-1", b"", b"1.0", b"1e3", b"+1"]),
    ("version", [b"0", b"10", b"9" * 18, b"9" * 19, b"0x1", b" 1"]),
    ("loss", [b"null", b"nul", b"nullx", b"0", b"-0", b"00", b"-", b"1" * 20, b"1" * 21, b"-" + b"9" * 20,
              b"0.5", b"0." + b"1" * 20, b"0." + b"1" * 21, b"1.", b".5", b"1e5", b"1E+5", b"1e-300", b"1e999",
              b"-1e999", b"1e1000", b"1e", b"1e+", b"2.5e-3", b"123456789012345678901.5", b"NaN", b"Infinity",
              b"-0.0", b"1.7976931348623157e308", b"1.7976931348623159e308", b"5e-324", b"99999999999999999999"]),
    ("values", [b"0", b"1", b"9" * 10, b"9" * 11, b"01", b"-1", b"4294967296"]),
    ("indices", [None, b"0", b"2", b"9" * 10, b"9" * 11, b"00", b""]),
])
def test_each_boundary_of_the_expression(field, texts):
    for text in texts:
        _agree(_head(**{field: text}))


def test_headers_around_the_canonical_ones():
    """Fixed and odd prefixes and endings, and 6,000 headers one random edit (a byte replaced, inserted
    or removed, from the characters the expression is made of) away from canonical ones."""
    base = [wire.encode(wire.Push("s" * k, seq, version, np.zeros(3, np.float32),
                                  None if dense else np.arange(3, dtype=np.uint32), loss))[0]
            for k, seq, version, loss, dense in [(1, 0, 0, None, True), (16, 12, 3, 0.25, False),
                                                 (256, 10**17, 10**17, -1e-7, False), (9, 5, 5, 2.0, True)]]
    for head in base:
        head = bytes(memoryview(head))
        _agree(head)
        for odd in (head[:-1], head + b" ", head + b"\0", b"EB\x01\x06" + head[4:], b"EB\x02\x05" + head[4:],
                    b"" , head[:5], head.replace(b'"seq"', b'"Seq"')):
            _agree(odd)
    rng = random.Random(0)
    alphabet = b'0123456789-+.eE",:[]{}nulsaZ_<f4u\x00\xff '
    for _ in range(6_000):
        head = bytearray(bytes(memoryview(rng.choice(base))))
        at, what = rng.randrange(len(head) + 1), rng.randrange(3)
        ch = alphabet[rng.randrange(len(alphabet))]
        if what == 0 and at < len(head):
            head[at] = ch
        elif what == 1:
            head.insert(at, ch)
        elif at < len(head):
            del head[at]
        _agree(bytes(head))


def test_buffers_of_every_kind_are_read():
    head = _head()
    expect = _expression(head)
    for buf in (head, bytearray(head), memoryview(head), np.frombuffer(head, np.uint8)):
        assert _same(_compiled().push_v1(buf), expect)
    assert math.isnan(_compiled().push_v1(head)[3])
    with pytest.raises(TypeError):
        _compiled().push_v1("not a buffer")


@pytest.mark.parametrize("loss", [None, 0.5, -0.0, 12.0])
@pytest.mark.parametrize("sparse", [False, True])
def test_push_fields_by_the_expression_alone_is_decode(monkeypatch, loss, sparse):
    """Where the C part is not built: the expression's reading, the fields ``decode`` gives."""
    monkeypatch.setattr(wire, "_HEADER", None)
    values = np.array([0.5, -1.0, 2.0], np.float32)
    push = wire.Push("abc", 4, 2, values, np.array([1, 5, 9], np.uint32) if sparse else None, loss)
    frames = [memoryview(f) if not isinstance(f, np.ndarray) else memoryview(f.data) for f in wire.encode(push)]
    session, seq, version, vals, idx, got_loss, nbytes = wire.push_fields(frames, 10**6)
    decoded = wire.decode(frames)
    assert (session, seq, version) == (decoded.session, decoded.seq, decoded.version)
    assert repr(got_loss) == repr(decoded.loss) and nbytes == wire.frames_nbytes(frames)
    assert vals.tobytes() == decoded.values.tobytes()
    assert (idx is None) == (decoded.indices is None) and (idx is None or idx.tobytes() == decoded.indices.tobytes())


def _frame_variants():
    """Pushes as the serve loop (memoryviews) and the sim (bytes and arrays) hand them over, and each
    way a message can miss the short path at the frame level: frame count, frame sizes, the cap, the
    header frame's type, an array without a contiguous buffer."""
    values, idx = np.array([0.5, -1.0, 2.0], np.float32), np.array([1, 5, 9], np.uint32)
    for sparse in (False, True):
        frames = wire.encode(wire.Push("abc", 4, 2, values, idx if sparse else None, 0.25))
        head = bytes(memoryview(frames[0]))
        arrays = [np.ascontiguousarray(f) for f in frames[1:]]
        yield "sim", [head, *arrays]
        yield "loop", [memoryview(head), *(memoryview(a.data) for a in arrays)]
        yield "tuple", (head, *arrays)
        yield "bytes", [head, *(a.tobytes() for a in arrays)]
        yield "too few", [head, *arrays][:-1]
        yield "too many", [head, *arrays, arrays[0]]
        yield "short values", [head, arrays[0][:2], *arrays[1:]]
        yield "long last", [head, *arrays[:-1], np.concatenate([arrays[-1], arrays[-1][:1]])]
        yield "bytearray head", [bytearray(head), *arrays]
        yield "array head", [np.frombuffer(head, np.uint8), *arrays]
        yield "strided head", [memoryview(np.frombuffer(head * 2, np.uint8)[::2]), *arrays]
        yield "strided values", [head, np.repeat(arrays[0], 2)[::2], *arrays[1:]]
        yield "not canonical", [head.replace(b'"seq"', b'"Seq"'), *arrays]
    yield "one frame", [head]


@pytest.mark.parametrize("max_bytes", [10**6, None])
def test_push_frames_is_the_python_reading(max_bytes):
    """``_pushhead.push_frames`` (the frames' count, sizes and the cap, in C) and ``_push_fields_py``
    give the same fields, or both hand the message to the general way, for every way a message can
    miss the short path at the frame level; the cap is exact to the byte."""
    _compiled()
    for name, frames in _frame_variants():
        size = wire.frames_nbytes(frames)
        for cap in [max_bytes] if max_bytes else [size, size - 1]:   # the message's own size and a byte less
            fast, slow = wire.push_fields(frames, cap), wire._push_fields_py(frames, cap)
            if fast is None or slow is None:
                assert fast is slow, (name, cap, fast, slow)
                continue
            assert fast[:3] == slow[:3] and repr(fast[5]) == repr(slow[5]) and fast[6] == slow[6], name
            assert fast[3].dtype == slow[3].dtype and fast[3].tobytes() == slow[3].tobytes(), name
            assert (fast[4] is None) == (slow[4] is None), name
            assert fast[4] is None or (fast[4].dtype == slow[4].dtype and fast[4].tobytes() == slow[4].tobytes())
    values = np.zeros(3, np.float32)
    frames = wire.encode(wire.Push("abc", 4, 2, values, None, 0.25))
    assert wire.push_fields([frames[0], "not a buffer"], 10**6) is None
    assert wire.push_fields(iter([frames[0], values]), 10**6) is None   # a list or a tuple only
