"""Property tests: no frame sequence a peer can send crashes the decoder or the PS, or changes Θ when refused."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgebed import wire
from edgebed.ps.rules import RULES
from edgebed.ps.server import ParameterServer, PSConfig

N_PARAMS = 64
PREFIX = struct.Struct("<2sBB")
FUZZ = settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def make_ps(rule: str = "adacomp", max_bytes: int = 1 << 16) -> ParameterServer:
    theta = np.linspace(-1, 1, N_PARAMS, dtype=np.float32)
    cfg = PSConfig(n_devices=4, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "c",
                   max_message_bytes=max_bytes)
    return ParameterServer(cfg, theta, RULES[rule](theta, 0.1))


def hello(ps: ParameterServer, device: int = 0) -> str:
    reply = wire.decode(ps.process(b"p", wire.encode(wire.Hello(device, "c", 0))))
    assert isinstance(reply, wire.Welcome)
    ps.process(b"p", wire.encode(wire.Pull(reply.session)))
    return reply.session


# -- strategies: from random bytes to almost-valid messages --------------------------------------
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                         st.floats(allow_nan=False), st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)), max_leaves=12)
dtypes = st.sampled_from(["<f4", "<f2", "<u4", "<i4", "<f8", ">f4", "|u1", "x", ""])
dims = st.one_of(st.integers(0, 80), st.integers(-3, 2**66), st.just(2**32))
array_specs = st.lists(st.tuples(st.sampled_from(["values", "indices", "params", "x"]), dtypes,
                                 st.lists(dims, max_size=3)), max_size=3)


@st.composite
def headers(draw, session: str | None = None):
    mtype = draw(st.one_of(st.sampled_from(sorted(wire.MESSAGE_TYPES)), st.integers(0, 255)))
    version = draw(st.sampled_from([1, 1, 2, 0, 3, 255]))
    magic = draw(st.sampled_from([wire.MAGIC, wire.MAGIC, b"XX"]))
    meta = draw(st.dictionaries(st.sampled_from(["device", "session", "seq", "version", "attempt",
                                                 "speed_class", "loss", "reason", "code", "extra"]),
                                json_values, max_size=6))
    if session is not None and draw(st.booleans()):
        meta["session"] = session
    specs = draw(array_specs)
    meta["arrays"] = [list(s) for s in specs]
    body = json.dumps(meta).encode()
    if draw(st.booleans()):
        body = body[: draw(st.integers(0, len(body)))]   # truncated header
    frames = [PREFIX.pack(magic, version, mtype) + body]
    for name, dt, shape in specs:
        size = draw(st.integers(0, 64))
        frames.append(draw(st.binary(min_size=size, max_size=size)))
    return frames


@st.composite
def mutated_pushes(draw, session: str):
    """Valid-looking pushes with one thing wrong (or nothing): shapes, dtypes, ranges, values."""
    n = draw(st.integers(0, 12))
    idx = np.array(sorted(draw(st.lists(st.integers(0, N_PARAMS + 5), min_size=n, max_size=n))), dtype=np.uint32)
    vals = np.array(draw(st.lists(st.floats(width=32), min_size=n, max_size=n)), dtype=np.float32)
    kind = draw(st.sampled_from(["sparse", "dense", "dense-short", "int-idx", "float-vals16", "2d"]))
    if kind == "dense":
        vals = np.array(draw(st.lists(st.floats(width=32), min_size=N_PARAMS, max_size=N_PARAMS)),
                        dtype=np.float32)
        idx = None
    elif kind == "dense-short":
        idx = None
    elif kind == "int-idx":
        idx = idx.astype(np.int32) - 3
    elif kind == "float-vals16":
        with np.errstate(over="ignore"):
            vals = vals.astype(np.float16)
    elif kind == "2d" and n:
        vals = vals.reshape(1, n)
    version = draw(st.sampled_from([0, 0, 1, 5, -1]))
    seq = draw(st.integers(-2, 5))
    return wire.encode(wire.Push(session, seq, version, vals, idx, 0.5))


# -- properties ------------------------------------------------------------------------------------
@FUZZ
@given(st.lists(st.binary(max_size=96), max_size=4))
def test_decode_random_bytes_raises_only_wire_error(frames):
    try:
        wire.decode(frames)
    except wire.WireError as err:
        assert err.code


@FUZZ
@given(headers())
def test_decode_structured_garbage_raises_only_wire_error(frames):
    try:
        msg = wire.decode(frames)
    except wire.WireError as err:
        assert err.code
    else:
        assert type(msg) in wire.MESSAGE_TYPES.values()


@FUZZ
@given(st.data())
def test_ps_survives_any_frames_and_refusals_leave_theta_alone(data):
    ps = make_ps(data.draw(st.sampled_from(sorted(RULES))))
    session = hello(ps)
    for _ in range(data.draw(st.integers(1, 4))):
        frames = data.draw(st.one_of(headers(session), mutated_pushes(session),
                                     st.lists(st.binary(max_size=64), max_size=3)))
        theta, version, rejected = ps.theta.copy(), ps.version, ps.meter.rejected
        reply = ps.process(b"p", frames)           # must never raise
        if reply is None:
            assert version == ps.version
            continue
        msg = wire.decode(reply)                   # the PS always answers with a valid message
        if isinstance(msg, wire.Error):
            assert ps.meter.rejected == rejected + 1
            assert ps.version == version
            np.testing.assert_array_equal(ps.theta, theta)
        elif (isinstance(msg, wire.Ack) and msg.applied) or isinstance(msg, wire.Sync):   # Sync: applied, round ends
            assert ps.version == version + 1
            assert np.isfinite(ps.theta).all()   # max_abs_value keeps huge finite values out
        else:
            assert ps.version == version
            np.testing.assert_array_equal(ps.theta, theta)


@pytest.mark.parametrize("frames, code", [
    ([PREFIX.pack(b"EB", 1, 3) + b"[" * 50_000], "bad-header"),                 # deep nesting
    ([PREFIX.pack(b"EB", 1, 1) + b'{"device":' + b"1" * 5000 + b"}"], "bad-header"),  # 5000-digit int
    ([PREFIX.pack(b"EB", 1, 5) + json.dumps({"session": "a", "seq": 0, "version": 0,
                                              "arrays": [["values", ["x"], [1]]]}).encode(), b"abcd"], "bad-dtype"),
    ([PREFIX.pack(b"EB", 1, 5) + json.dumps({"session": "a", "seq": 0, "version": 0,
                                              "arrays": [["values", "<f4", [2**32, 2**32]]]}).encode(), b""],
     "bad-array"),            # int64 wrap-around; each dimension is bounded by the message size since issue 29
    ([PREFIX.pack(b"EB", 1, 5) + json.dumps({"session": "a", "seq": 0, "version": 0,
                                              "arrays": [["values", "<f4", [2**70]]]}).encode(), b""], "bad-length"),
])
def test_decode_regressions_found_by_fuzzing(frames, code):
    """Each of these crashed decode (RecursionError, ValueError, TypeError, OverflowError) before."""
    with pytest.raises(wire.WireError) as info:
        wire.decode(frames)
    assert info.value.code == code
