"""Compact encodings (wire v2): round trips, the size model, per-push choice, malformed payloads."""
import json
import struct

import numpy as np
import pytest

from edgebed.compression import TopCPerLayer, make_compressor
from edgebed.models import Layer
from edgebed.wire import codec
from edgebed import wire
from edgebed.wire.codec import Codec

N = 211_690   # the paper CNN


def as_bytes(frames):
    return [bytes(memoryview(f)) if not isinstance(f, np.ndarray) else f.tobytes() for f in frames]


def sparse(n=N, k=2122, seed=0):
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n, k, replace=False)).astype(np.uint32)
    return idx, rng.normal(0, 0.01, k).astype(np.float32)


@pytest.mark.parametrize("values", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("indices", ["auto", "varint", "bitmap"])
@pytest.mark.parametrize("zstd", [False, True])
def test_push_roundtrip_every_coding(values, indices, zstd):
    idx, v = sparse()
    m = wire.decode(as_bytes(wire.encode(wire.Push("s", 3, 2, v, idx, 0.5, codec=Codec(values, indices, zstd)))))
    np.testing.assert_array_equal(m.indices, idx)
    assert m.values.dtype == np.float32 and m.indices.dtype == np.uint32
    tol = {"f32": 0, "f16": 1e-3, "bf16": 8e-3}[values]
    np.testing.assert_allclose(m.values, v, rtol=tol, atol=1e-7 if values == "f16" else 0)
    assert (m.session, m.seq, m.version, m.loss) == ("s", 3, 2, 0.5)


def test_varint_edges():
    u = np.array([0, 1, 127, 128, 16383, 16384, 2**21, 2**28 - 1, 2**28, 2**32 - 1], np.uint64)
    enc = codec.varint_encode(u)
    assert enc.size == int(codec.varint_sizes(u).sum()) == 1 + 1 + 1 + 2 + 2 + 3 + 4 + 4 + 5 + 5
    np.testing.assert_array_equal(codec.varint_decode(enc, u.size), u)


def test_size_model_is_the_encoded_size_and_auto_picks_the_smaller():
    for k in (50, 2122, 60_000):   # sparse → varint; c ≈ 0.3 → bitmap
        idx, v = sparse(k=k)
        sizes = codec.index_sizes(idx)
        enc, payload = codec.encode_update(v, idx, Codec("f16"))
        assert enc["i"] == min(sizes, key=sizes.get)
        assert payload.size == min(sizes.values()) + 2 * k
    assert codec.encode_update(*sparse(k=60_000)[::-1], Codec())[0]["i"] == "bitmap"


def test_v1_frames_unchanged_without_codec_and_still_decoded():
    idx, v = sparse()
    frames = wire.encode(wire.Push("s", 0, 0, v, idx))
    assert frames[0][2] == 1 and wire.frames_nbytes(frames) - len(frames[0]) == 8 * idx.size
    m = wire.decode(as_bytes(frames))
    np.testing.assert_array_equal(m.values, v)


def test_unknown_version_refused_with_a_clear_error():
    frames = as_bytes(wire.encode(wire.Pull("s")))
    frames[0] = frames[0][:2] + bytes([3]) + frames[0][3:]
    with pytest.raises(wire.WireError, match="bad-version: protocol version 3; this side speaks versions 1, 2"):
        wire.decode(frames)


def v2_push(enc, payload):
    head = {"session": "s", "seq": 0, "version": 0, "loss": None, "enc": enc,
            "arrays": [["payload", "|u1", [len(payload)]]]}
    return [struct.pack("<2sBB", b"EB", 2, 5) + json.dumps(head).encode(), payload]


@pytest.mark.parametrize("enc,payload,what", [
    ({"n": 2, "i": "varint", "ib": 2, "v": "f32", "s": 0, "z": 0}, b"\x01\x81" + bytes(8), "complete numbers"),
    ({"n": 1, "i": "varint", "ib": 6, "v": "f32", "s": 0, "z": 0}, b"\xff" * 5 + b"\x01" + bytes(4), "6 bytes"),
    ({"n": 3, "i": "bitmap", "ib": 1, "v": "f32", "s": 0, "z": 0}, b"\x03" + bytes(12), "sets 2 indices"),
    ({"n": 2, "i": "none", "ib": 0, "v": "f16", "s": 0, "z": 0}, bytes(3), "f16 section of 3 bytes"),
    ({"n": 2, "i": "none", "ib": 0, "v": "q8", "s": 1, "z": 0}, struct.pack("<If", 3, 1.0) + bytes(2), "sum to 3"),
    ({"n": 1, "i": "none", "ib": 0, "v": "f32", "s": 0, "z": 99}, bytes(4), "zstd"),
    ({"n": 1, "i": "none", "ib": 0, "v": "f64", "s": 0, "z": 0}, bytes(8), "unknown value coding"),
    ({"n": -1, "i": "none", "ib": 0, "v": "f32"}, bytes(4), "non-negative"),
    ("x", bytes(4), "enc must hold"),
])
def test_malformed_v2_payloads_are_refused(enc, payload, what):
    with pytest.raises(wire.WireError, match=what) as err:
        wire.decode(v2_push(enc, payload))
    assert err.value.code == "bad-encoding"


def test_fp16_falls_back_to_f32_beyond_its_range_and_bf16_keeps_tiny_values():
    big = np.array([1e5, 1.0], np.float32)
    assert codec.encode_update(big, None, Codec("f16"))[0]["v"] == "f32"
    tiny = np.array([3e-8, -1e-9], np.float32)   # lr-scaled gradients: fp16 subnormal or zero
    m = wire.decode(as_bytes(wire.encode(wire.Push("s", 0, 0, tiny, codec=Codec("bf16")))))
    np.testing.assert_allclose(m.values, tiny, rtol=8e-3)


def test_q8_push_is_one_byte_a_value():
    layers = [Layer("w", 0, 1000, (1000,)), Layer("b", 1000, 10, (10,))]
    comp = make_compressor("dense", 1.0, layers, quantize="q8", rng=np.random.default_rng(0))
    s = comp.compress(np.random.default_rng(1).normal(size=1010).astype(np.float32))
    frames = wire.encode(wire.Push("s", 0, 0, s.values, s.indices, codec=Codec(), q8=s.q8))
    assert memoryview(frames[1]).nbytes == 1010 + 8 * 2
    m = wire.decode(as_bytes(frames))
    np.testing.assert_allclose(m.values, s.values, rtol=1e-6)


def test_cnn_push_bytes_per_encoding_shrink_in_order():
    """c = 0.01 AdaComp push of the paper CNN (2,122 entries): v1 > varint+f32 > varint+f16 > +zstd."""
    from edgebed.models import build_model, layers_of
    layers = layers_of(build_model("cnn", 0))
    g = np.random.default_rng(0).normal(0, 0.01, N).astype(np.float32)
    s = TopCPerLayer(0.01, layers).compress(g)
    size = lambda c: wire.frames_nbytes(wire.encode(wire.Push("s", 0, 0, s.values, s.indices, codec=c))) # noqa
    sizes = [size(None), size(Codec("f32")), size(Codec("f16")), size(Codec("f16", zstd=True))]
    assert s.entries == 2122 and sizes[0] - 8 * 2122 < 200
    assert sizes == sorted(sizes, reverse=True) and sizes[2] < 0.45 * sizes[0]


from hypothesis import given, settings, strategies as st   # noqa: E402


@settings(max_examples=300, deadline=None)
@given(enc=st.fixed_dictionaries({
    "n": st.integers(0, 40), "i": st.sampled_from(["none", "varint", "bitmap", "zz"]), "ib": st.integers(0, 40),
    "v": st.sampled_from(["f32", "f16", "bf16", "q8"]), "s": st.integers(0, 3), "z": st.sampled_from([0, 0, 7])}),
    payload=st.binary(max_size=120))
def test_random_v2_payloads_decode_or_raise_wire_error(enc, payload):
    try:
        m = wire.decode(v2_push(enc, payload))
    except wire.WireError as err:
        assert err.code in ("bad-encoding", "bad-array")
    else:
        assert m.values.dtype == np.float32 and m.values.size == enc["n"]
        assert m.indices is None or (m.indices.dtype == np.uint32 and m.indices.size == enc["n"])
