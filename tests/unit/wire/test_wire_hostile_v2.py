"""Issue 29: no message can end a run. Every decode path of wire v2 is total (a refusal with a code,
never an exception out of the PS), nothing expands beyond what the header and the model allow, a
stranger makes the PS unpack nothing, and pushed values are bounded relative to Θ."""
from __future__ import annotations

import json
import struct
import tracemalloc

import numpy as np
import pytest
import zstandard

from edgebed import wire
from edgebed.wire import codec
from edgebed.wire.codec import Codec
from edgebed.ps.rules import RULES
from edgebed.ps.server import ParameterServer, PSConfig
from tests.hostile_v2 import zstd_declaring

N = 4096
H = wire._PREFIX


def make_ps(rule: str = "adacomp", lr: float = 0.1, **cfg) -> ParameterServer:
    theta = np.linspace(-1, 1, N, dtype=np.float32)
    return ParameterServer(PSConfig(n_devices=2, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "c", **cfg), theta,
                           RULES[rule](theta, lr))


def ask(ps, frames, peer=b"A"):
    return wire.decode(ps.process(peer, frames))


def join(ps, peer=b"A", device=0) -> str:
    s = ask(ps, wire.encode(wire.Hello(device)), peer).session
    assert isinstance(ask(ps, wire.encode(wire.Pull(s)), peer), wire.Model)
    return s


def v2_push(session: str, enc: dict, payload: bytes, seq: int = 0, **fields) -> list:
    meta = {"session": session, "seq": seq, "version": 0, "loss": None, **fields,
            "arrays": [["payload", "|u1", [len(payload)]]], "enc": enc}
    return [H.pack(b"EB", 2, 5) + json.dumps(meta).encode(), payload]


def zstd_stream(nbytes: int) -> bytes:
    """``nbytes`` zeros compressed by a streaming compressor (no content size in the frame)."""
    obj = zstandard.ZstdCompressor(level=1).compressobj()
    chunk = bytes(1 << 20)
    parts = [obj.compress(chunk) for _ in range(nbytes >> 20)] + [obj.compress(bytes(nbytes & ((1 << 20) - 1)))]
    return b"".join(parts) + obj.flush()


HOSTILE = {   # name → (enc, payload): every one under 200 bytes on the wire or a few kB at most
    "zstd frame declaring 1 TB": ({"n": 4, "i": "none", "ib": 0, "v": "f32", "s": 0, "z": 16},
                                  zstd_declaring(1 << 40)),
    "zstd declared size beyond the sections": ({"n": 4, "i": "none", "ib": 0, "v": "f32", "s": 0, "z": 1 << 30},
                                               zstd_declaring(1 << 30)),
    "zstd frame unpacking beyond its header": ({"n": 4, "i": "none", "ib": 0, "v": "f32", "s": 0, "z": 16},
                                               zstd_stream(100 << 20)),
    "zstd frame asking a huge window": ({"n": 4, "i": "none", "ib": 0, "v": "f32", "s": 0, "z": 16},
                                        b"\x28\xb5\x2f\xfd\x00\xf8" + bytes(16)),
    "zstd garbage": ({"n": 4, "i": "none", "ib": 0, "v": "f32", "s": 0, "z": 16}, b"\x28\xb5\x2f\xfd" + bytes(9)),
    "value coding a list": ({"n": 1, "i": "none", "ib": 0, "v": ["f32"], "s": 0, "z": 0}, bytes(4)),
    "index coding a dict": ({"n": 1, "i": {"a": 1}, "ib": 0, "v": "f32"}, bytes(4)),
    "enc a list": (["n", "i"], bytes(4)),
    "entries beyond the model": ({"n": N + 1, "i": "none", "ib": 0, "v": "f32"}, bytes(4 * (N + 1))),
    "2**70 entries": ({"n": 2 ** 70, "i": "varint", "ib": 0, "v": "f32"}, bytes(4)),
    "8 MiB raw bitmap": ({"n": 8 << 20, "i": "bitmap", "ib": 8 << 20, "v": "q8", "s": 0},
                         b"\xff" * (8 << 20) + bytes(8 << 20)),
    "bitmap beyond the model": ({"n": 1, "i": "bitmap", "ib": N // 8 + 2, "v": "f32"}, bytes(N // 8 + 1) + b"\1" + bytes(4)),
    "varint section beyond 5 bytes an entry": ({"n": 1, "i": "varint", "ib": 6, "v": "f32"}, b"\x80" * 5 + b"\0" + bytes(4)),
    "q8 segments beyond the model": ({"n": 1, "i": "none", "ib": 0, "v": "q8", "s": N + 1}, bytes(8 * (N + 1) + 1)),
    "q8 segment counts wrapping": ({"n": 2, "i": "varint", "ib": 2, "v": "q8", "s": 2},
                                   b"\0\1" + struct.pack("<II", 2 ** 32 - 1, 3) + bytes(8) + bytes(2)),
    "delta base on a push": ({"n": 1, "i": "varint", "ib": 1, "v": "f32", "b": 3}, b"\0" + bytes(4)),
    "bool sizes": ({"n": True, "i": "none", "ib": False, "v": "f32"}, bytes(4)),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_v2_push_is_refused_with_a_code_and_the_ps_goes_on(name):
    ps = make_ps()
    s = join(ps)
    theta = ps.theta.copy()
    enc, payload = HOSTILE[name]
    frames = v2_push(s, enc, payload)
    tracemalloc.start()
    reply = ask(ps, frames)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2 << 20, f"refusing it took {peak / 2**20:.1f} MiB"   # nothing expanded
    assert isinstance(reply, wire.Error) and reply.code in ("bad-encoding", "bad-payload"), reply
    assert ps.version == 0 and ps.meter.rejected == 1 and sum(ps.errors.values()) == 1
    np.testing.assert_array_equal(ps.theta, theta)
    good = wire.Push(s, 1, 0, np.ones(3, np.float32), np.array([1, 9, 99], np.uint32), codec=Codec(zstd=True))
    assert ask(ps, wire.encode(good)).applied and ps.version == 1   # the session was not punished


def test_a_stranger_makes_the_ps_unpack_nothing(monkeypatch):
    """Session (and connection) checked from the header alone: no zstd, no index expansion."""
    ps = make_ps()
    s = join(ps, b"A")
    unpacked = []
    monkeypatch.setattr(codec, "decode_update", lambda *a, **k: unpacked.append(a) or (_ for _ in ()).throw(
        AssertionError("unpacked")))
    for session, peer in (("f" * 16, b"B"), (s, b"B")):   # made up; someone else's on another connection
        reply = ask(ps, v2_push(session, *HOSTILE["zstd frame declaring 1 TB"]), peer)
        assert isinstance(reply, wire.Error) and reply.code == "unknown-session"
    model = [H.pack(b"EB", 2, 4) + json.dumps({"version": 0, "arrays": [["payload", "|u1", [4]]],
                                                "enc": {"n": 1, "i": "none", "ib": 0, "v": "f32"}}).encode(), bytes(4)]
    assert ask(ps, model).code == "unexpected"
    assert not unpacked and ps.errors == {"unknown-session": 2, "unexpected": 1} and ps.meter.rejected == 3


@pytest.mark.parametrize("frames, code", [
    ([H.pack(b"EB", 1, 5) + json.dumps({"session": "s", "seq": 0, "version": 0,
                                        "arrays": [["values", "<f4", [0, 2 ** 70]]]}).encode(), b""], "bad-array"),
    ([H.pack(b"EB", 1, 5) + json.dumps({"session": "s", "seq": 0, "version": 0,
                                        "arrays": [["values", "<f4", [0] * 70]]}).encode(), b""], "bad-array"),
])
def test_v1_shapes_numpy_can_not_make_are_refused(frames, code):
    with pytest.raises(wire.WireError) as info:
        wire.decode(frames)
    assert info.value.code == code


def test_any_exception_while_decoding_becomes_a_refusal(monkeypatch):
    """A check we lack (here: numpy failing inside the codec) is still a refusal, counted, not a crash."""
    ps = make_ps()
    s = join(ps)

    def boom(*a):
        raise MemoryError("numpy could not allocate")
    monkeypatch.setattr(codec, "decode_values", boom)
    reply = ask(ps, wire.encode(wire.Push(s, 0, 0, np.ones(2, np.float32), np.array([1, 2], np.uint32),
                                          codec=Codec())))
    assert isinstance(reply, wire.Error) and reply.code == "bad-message" and "MemoryError" in reply.message
    assert ps.meter.rejected == 1 and ps.errors == {"bad-message": 1}


def test_honest_zstd_payloads_still_unpack():
    """The bounded decompressor takes what every honest sender writes (content size in the frame)."""
    ps = make_ps()
    s = join(ps)
    rng = np.random.default_rng(0)
    zipped = 0
    for k in (1, 40, N // 2, N):
        idx = np.sort(rng.choice(N, k, replace=False)).astype(np.uint32)
        for values in ("f32", "f16", "bf16"):
            push = wire.Push(s, ps.version, ps.version, rng.normal(0, 0.01, k).astype(np.float32),
                             idx, codec=Codec(values, "auto", zstd=True))
            frames = wire.encode(push)
            zipped += json.loads(bytes(frames[0][4:]))["enc"]["z"] > 0
            assert ask(ps, [bytes(memoryview(f)) for f in frames]).applied
    assert ps.meter.rejected == 0 and ps.version == 12 and zipped >= 6


# -- Θ protected -------------------------------------------------------------------------------------
def test_poison_that_would_move_theta_a_hundredfold_is_refused_and_honest_pushes_go_on():
    """Issue 29: three dense pushes of −1e6 were applied under the constant ±1e6 range, and every honest
    gradient after them was refused. The bound now scales with Θ and α: they are refused."""
    ps = make_ps("asgd", lr=0.05)
    s = join(ps)
    theta = ps.theta.copy()
    for seq in range(3):
        reply = ask(ps, wire.encode(wire.Push(s, seq, 0, np.full(N, -1e6, np.float32))))
        assert isinstance(reply, wire.Error) and "max_step" in reply.message, reply
    np.testing.assert_array_equal(ps.theta, theta)
    assert ask(ps, wire.encode(wire.Push(s, 3, 0, np.full(N, 5.0, np.float32)))).applied


def test_the_bound_scales_with_the_model():
    """A model whose weights are (legitimately) 1e7 takes gradients of its own size: the constant ±1e6
    refused them and the run's devices all exited. The scale is the initial model's (issue #36: a bound
    that followed ‖Θ‖∞ grew with the poison it let in)."""
    theta = np.full(N, 1e7, np.float32)
    ps = ParameterServer(PSConfig(n_devices=2, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                                  class_of=lambda d: "c"), theta, RULES["asgd"](theta, 0.1))
    s = join(ps)
    assert ask(ps, wire.encode(wire.Push(s, 0, 0, np.full(N, 2e6, np.float32)))).applied
    assert isinstance(ask(ps, wire.encode(wire.Push(s, 1, 1, np.full(N, 1e11, np.float32)))), wire.Error)


def test_non_finite_theta_fails_the_run():
    ps = make_ps("asgd")
    s = join(ps)
    ps.theta[7] = np.inf          # e.g. many pushes, each within the bound, overflowed float32
    for seq in range(70):         # Θ is looked at every THETA_CHECK_EVERY updates
        reply = ask(ps, wire.encode(wire.Push(s, seq, ps.version, np.zeros(N, np.float32))))
        if isinstance(reply, wire.Stop):
            break
    assert ps.failure and "diverged" in ps.failure and ps.stopped == ps.failure
    assert isinstance(reply, wire.Stop)


def test_a_fixed_max_abs_value_still_overrides():
    ps = make_ps("asgd", max_abs_value=10.0)
    s = join(ps)
    reply = ask(ps, wire.encode(wire.Push(s, 0, 0, np.full(N, 11.0, np.float32))))
    assert isinstance(reply, wire.Error) and "max_abs_value" in reply.message
