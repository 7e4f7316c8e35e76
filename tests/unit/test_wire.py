"""Wire format: round trips, and malformed frames rejected with a code."""
import json
import struct

import numpy as np
import pytest

from edgebed.ps import wire


def roundtrip(msg):
    frames = wire.encode(msg)
    # what a socket delivers: bytes
    return wire.decode([bytes(memoryview(f)) if not isinstance(f, np.ndarray) else f.tobytes() for f in frames])


def test_roundtrip_every_message():
    theta = np.arange(10, dtype=np.float32)
    msgs = [wire.Hello(3, "fast", 1), wire.Welcome("s1", {"a": [1, 2]}), wire.Pull("s1"),
            wire.Model(7, theta), wire.Ack(8, True, True), wire.Stop("done"), wire.Bye("s1", "x"),
            wire.Heartbeat("s1"), wire.Error("bad", "msg"),
            wire.Push("s1", 4, 7, np.ones(3, np.float32), np.array([1, 5, 9], np.uint32), 0.5),
            wire.Push("s1", 5, 7, theta)]
    for m in msgs:
        out = roundtrip(m)
        assert type(out) is type(m)
        for k, v in vars(m).items():
            got = getattr(out, k)
            if isinstance(v, np.ndarray):
                np.testing.assert_array_equal(got, v)
                assert got.dtype == v.dtype
            elif isinstance(v, float) and np.isnan(v):
                assert np.isnan(got)
            else:
                assert got == v


def test_dense_push_has_no_indices_and_nan_loss_survives():
    m = roundtrip(wire.Push("s", 0, 0, np.zeros(4, np.float32)))
    assert m.indices is None and not m.sparse and np.isnan(m.loss)


def test_sparse_push_size_is_header_plus_8_bytes_per_entry():
    k = 2122
    frames = wire.encode(wire.Push("abcd", 1, 1, np.ones(k, np.float32), np.arange(k, dtype=np.uint32)))
    assert wire.frames_nbytes(frames) - len(frames[0]) == 8 * k


def header(mtype, meta, version=1, magic=wire.MAGIC):   # v1 frames: still decoded
    return struct.pack("<2sBB", magic, version, mtype) + json.dumps(meta).encode()


@pytest.mark.parametrize("frames,code", [
    ([], "empty"),
    ([b"E"], "truncated"),
    ([b"XX\x01\x03{}"], "bad-magic"),
    ([header(3, {"session": "s"}, version=9)], "bad-version"),
    ([header(99, {})], "unknown-type"),
    ([wire.MAGIC + b"\x01\x03{not json"], "bad-header"),
    ([header(3, {})], "missing-field"),
    ([header(3, {"session": 5})], "bad-field"),
    ([header(3, {"session": "s", "evil": 1})], "bad-field"),
    ([header(5, {"session": "s", "seq": 0, "version": 0, "arrays": [["values", "<f4", [2]]]}), b"\0" * 7], "bad-length"),
    ([header(5, {"session": "s", "seq": 0, "version": 0, "arrays": [["values", "|O", [1]]]}), b"\0" * 8], "bad-dtype"),
    ([header(5, {"session": "s", "seq": 0, "version": 0, "arrays": [["values", "<f4", [1]]]})], "frame-count"),
    ([header(5, {"session": "s", "seq": 0, "version": 0, "arrays": []})], "missing-array"),
    ([header(5, {"session": "s", "seq": 0, "version": 0, "arrays": [["params", "<f4", [1]]]}), b"\0" * 4], "bad-array"),
])
def test_malformed_frames_are_rejected_with_a_code(frames, code):
    with pytest.raises(wire.WireError) as e:
        wire.decode(frames)
    assert e.value.code == code


def test_oversized_message_rejected():
    frames = wire.encode(wire.Model(0, np.zeros(1000, np.float32)))
    with pytest.raises(wire.WireError) as e:
        wire.decode(frames, max_bytes=1000)
    assert e.value.code == "too-large"


@pytest.mark.parametrize("msg", [wire.Ack(0), wire.Ack(7, applied=False), wire.Ack(2**63 - 1, True, True),
                                 wire.Sync(0), wire.Sync(123456789)])
def test_flat_headers_are_byte_for_byte_the_json_header(msg):
    """Ack and Sync (one per push) are encoded by string formatting: the same bytes as the JSON path."""
    assert wire.encode(msg) == [wire._header(msg, 1, [])]
    assert wire.decode(wire.encode(msg)) == msg


def test_flat_header_falls_back_for_non_plain_values():
    """A numpy integer is no plain int: the JSON path decides (and refuses it, as before)."""
    with pytest.raises(TypeError):
        wire.encode(wire.Ack(np.int64(3)))
