"""Wire format: round trips, and malformed frames rejected with a code."""
import json
import struct

import numpy as np
import pytest

from edgebed import wire


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


# -- the canonical push header: read by one regular expression, the same Push as the generic path ------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _generic(frames):
    """decode with the canonical-push shortcut switched off."""
    saved, wire._PUSH_V1 = wire._PUSH_V1, None
    try:
        return wire.decode(frames)
    except wire.WireError as err:
        return ("error", err.code, str(err))
    finally:
        wire._PUSH_V1 = saved


def _fast(frames):
    try:
        return wire.decode(frames)
    except wire.WireError as err:
        return ("error", err.code, str(err))


def _same(a, b) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return a == b
    if type(a) is not type(b):
        return False
    for name in ("session", "seq", "version"):
        if getattr(a, name) != getattr(b, name):
            return False
    if repr(a.loss) != repr(b.loss):   # NaN == NaN, and -0.0 is not 0.0
        return False
    for name in ("values", "indices"):
        x, y = getattr(a, name), getattr(b, name)
        if (x is None) != (y is None) or (x is not None and (x.dtype != y.dtype or x.tobytes() != y.tobytes())):
            return False
    return True


@settings(max_examples=300, deadline=None, database=None)
@given(session=st.text(alphabet="0123456789abcdefXYZ_-", min_size=1, max_size=20),
       seq=st.integers(0, 2**63 - 1), version=st.integers(0, 2**63 - 1),
       loss=st.one_of(st.floats(allow_nan=True, allow_infinity=False), st.just(-0.0), st.just(float("nan"))),
       n=st.integers(0, 6), sparse=st.booleans())
def test_canonical_pushes_decode_as_the_generic_path_does(session, seq, version, loss, n, sparse):
    vals = np.arange(n, dtype=np.float32) - 2.5
    idx = np.arange(n, dtype=np.uint32) * 3 if sparse else None
    frames = [bytes(memoryview(f)) for f in wire.encode(wire.Push(session, seq, version, vals, idx, loss))]
    fast, generic = _fast(frames), _generic(frames)
    assert _same(fast, generic), (fast, generic)
    assert wire._PUSH_V1.fullmatch(frames[0]) or seq >= 10**18 or version >= 10**18, frames[0]
    _push_fields_agree(frames, generic)


def _push_fields_agree(frames, generic) -> None:
    """``push_fields`` (the PS's short path) gives the fields of ``decode``'s Push and the message's
    bytes, or None, when the PS then takes the message the general way."""
    fields = wire.push_fields([memoryview(f) for f in frames], wire.DEFAULT_MAX_MESSAGE_BYTES)
    if fields is not None:
        assert isinstance(generic, wire.Push), (fields, generic)
        *push, nbytes = fields
        assert _same(wire.Push(*push), generic) and nbytes == wire.frames_nbytes(frames)
    assert wire.push_fields(frames, wire.frames_nbytes(frames) - 1) is None   # over the cap: the general way


HEADER = b'EB\x01\x05{"session":"s1","seq":1,"version":0,"loss":%s,"arrays":[["values","<f4",[2]]%s]}'


@pytest.mark.parametrize("loss", [b"null", b"-0", b"0", b"12", b"-3.5", b"1e999", b"-1E+400", b"2.5e-3",
                                  b"123456789012345678901", b"1.0", b"NaN", b"Infinity", b"01", b"1.", b".5"])
@pytest.mark.parametrize("tail, arrays", [
    (b"", [b"\0" * 8]),                                    # dense, fits
    (b"", [b"\0" * 4]),                                    # dense, too short
    (b',["indices","<u4",[2]]', [b"\0" * 8, b"\0" * 8]),   # sparse, fits
    (b',["indices","<u4",[2]]', [b"\0" * 8, b"\0" * 12]),  # indices too long
    (b',["indices","<u4",[2]]', [b"\0" * 8]),              # a frame missing
    (b"", [b"\0" * 8, b"\0" * 8]),                         # a frame too many
])
def test_near_canonical_headers_get_the_generic_answer(loss, tail, arrays):
    """Whatever the shortcut matches or not, the answer (message or refusal) is the generic path's."""
    frames = [HEADER % (loss, tail), *arrays]
    assert _same(_fast(frames), _generic(frames)), (_fast(frames), _generic(frames))
    _push_fields_agree(frames, _generic(frames))


def test_ack_applied_is_the_encoded_ack():
    for version in (0, 1, 9, 10, 2**40, 2**63 - 1):
        assert wire.ack_applied(version) == wire.encode(wire.Ack(version, applied=True, freeze=False))
    assert wire.push_fields(wire.encode(wire.Ack(3)), 10**6) is None   # not a push


def test_welcome_config_travels_as_the_same_json_object():
    """WelcomeConfig is the typed form of Welcome.config: to_dict writes the object the engine always
    sent (keys in the same order, unset ones left out), so the Welcome's bytes are unchanged."""
    sent = {"timing": {"pacing": True}, "seed": 7, "n_devices": 4, "device": 2,
            "dataset": {"name": "mnist", "partition": "iid"}, "model": "mlp",
            "algorithm": {"name": "asgd", "batch_size": 10}, "compressor": "dense",
            "policy": {"name": "gradient"}, "speed_class": {"slowdown": 1.0},
            "app_link": {"uplink": {}, "downlink": {}}}
    cfg = wire.WelcomeConfig.from_dict(sent)
    assert cfg.seed == 7 and cfg.timing == {"pacing": True} and cfg.compression is None
    assert list(cfg.to_dict().items()) == list(sent.items())
    frames = wire.encode(wire.Welcome("s", cfg.to_dict()))
    assert frames == wire.encode(wire.Welcome("s", sent))
    assert wire.decode(frames).config == sent
    with pytest.raises(ValueError, match="missing \\['seed'\\].*unknown \\['extra'\\]"):
        wire.WelcomeConfig.from_dict({**{k: v for k, v in sent.items() if k != "seed"}, "extra": 1})
