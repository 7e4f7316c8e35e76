"""Structure-aware hostile messages for wire v2 (issue 29): valid headers around hostile ``enc`` fields,
sizes, zstd frames, index sections, v1 shapes and frame counts. Shared by the live-run fuzz test
(tests/integration/test_hostile_wire_v2.py) and benchmarks/hostile_soak.py; every generator takes a
numpy Generator, the session to use, the version and the model's size, and returns the frames."""
from __future__ import annotations

import json
import struct

import numpy as np
import zstandard

PREFIX = struct.Struct("<2sBB")
_ZSTD = zstandard.ZstdCompressor(level=1)


def push_v2(session: str, version: int, enc, payload: bytes, seq: int = 0, spec=None) -> list:
    meta = {"session": session, "seq": seq, "version": version, "loss": 0.5,
            "arrays": spec if spec is not None else [["payload", "|u1", [len(payload)]]], "enc": enc}
    return [PREFIX.pack(b"EB", 2, 5) + json.dumps(meta, separators=(",", ":")).encode(), payload]


def zstd_declaring(size: int, body: bytes = b"\0" * 16) -> bytes:
    """A zstd frame whose header declares ``size`` bytes of content and holds ``body`` raw."""
    block = struct.pack("<I", 1 | (len(body) << 3))[:3]   # last block, raw
    return struct.pack("<I", 0xFD2FB528) + bytes([0xE0]) + struct.pack("<Q", size) + block + body


_STREAMED: list[bytes] = []


def _streamed() -> bytes:
    """8 MiB of zeros through a streaming compressor (its frame declares no content size), made once."""
    if not _STREAMED:
        obj = zstandard.ZstdCompressor(level=1).compressobj()
        _STREAMED.append(obj.compress(bytes(8 << 20)) + obj.flush())
    return _STREAMED[0]


def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _hostile_value(rng):
    return _pick(rng, [-1, 2 ** 70, 2 ** 63, 1.5, True, None, "f32", ["f32"], {"a": 1}, [], "", "x" * 300,
                       float(2 ** 31), 10 ** 30])


def v2_enc(rng, session: str, version: int, n_params: int) -> list:
    """A plausible enc with one to three fields replaced by hostile values, or keys missing/added."""
    enc = {"n": 4, "i": "none", "ib": 0, "v": "f32", "s": 0, "z": 0}
    for key in rng.choice(list(enc) + ["b", "extra"], int(rng.integers(1, 4)), replace=False):
        if rng.random() < 0.2:
            enc.pop(str(key), None)
        else:
            enc[str(key)] = _hostile_value(rng)
    if rng.random() < 0.1:
        enc = _pick(rng, [None, [], "enc", 7, [["n", 4]]])
    return push_v2(session, version, enc, bytes(16))


def v2_sizes(rng, session: str, version: int, n_params: int) -> list:
    """Codings that exist, sizes that don't fit: entries beyond the model, sections larger than the
    entries can need, q8 segments beyond the model, payload shorter or longer than announced."""
    n = int(_pick(rng, [0, 1, 4, n_params, n_params + 1, 8 << 20, 2 ** 40]))
    how_i = _pick(rng, ["none", "varint", "bitmap"])
    how_v = _pick(rng, ["f32", "f16", "bf16", "q8"])
    ib = int(_pick(rng, [0, 1, 5 * max(n, 1) + 1, n_params // 8 + 2, 1 << 20]))
    segs = int(_pick(rng, [0, 1, n_params + 1])) if how_v == "q8" else 0
    size = int(rng.integers(0, 4096))
    return push_v2(session, version, {"n": n, "i": how_i, "ib": ib, "v": how_v, "s": segs, "z": 0},
                   bytes(rng.integers(0, 256, size, dtype=np.uint8)))


def v2_zstd(rng, session: str, version: int, n_params: int) -> list:
    """zstd frames that lie: declared sizes (1 TB, beyond the sections), no declared size but more
    output than announced, a huge window, truncated or garbage frames."""
    enc = {"n": 4, "i": "none", "ib": 0, "v": "f32", "s": 0, "z": 16}
    kind = int(rng.integers(6))
    if kind == 0:
        frame = zstd_declaring(int(_pick(rng, [1 << 40, 1 << 31, 17, 15])))
    elif kind == 1:
        frame = zstd_declaring(1 << 30)
        enc["z"] = 1 << 30
    elif kind == 2:   # streamed (no content size): expands to 8 MiB, the header says 16 B
        frame = _streamed()
    elif kind == 3:
        frame = b"\x28\xb5\x2f\xfd\x00\xf8" + bytes(16)   # window descriptor: the largest window there is
    elif kind == 4:
        frame = _ZSTD.compress(bytes(16))[: int(rng.integers(1, 12))]
    else:
        frame = b"\x28\xb5\x2f\xfd" + bytes(rng.integers(0, 256, int(rng.integers(0, 64)), dtype=np.uint8))
    return push_v2(session, version, enc, frame)


def v2_index(rng, session: str, version: int, n_params: int) -> list:
    """Index sections that decode to nonsense: overlong or unterminated varints, bitmaps with more or
    fewer bits than entries, a valid encoding of indices beyond the model or not increasing."""
    kind = int(rng.integers(5))
    if kind == 0:
        ibuf = b"\xff" * int(rng.integers(1, 12))
        n = 1
    elif kind == 1:
        ibuf, n = b"\x80" * 4 + b"\x7f", 1   # a valid 5-byte varint: 2**34 - 1, beyond uint32
    elif kind == 2:
        ibuf, n = bytes([0xFF]) * int(rng.integers(1, 8)), int(rng.integers(1, 5))
        return push_v2(session, version, {"n": n, "i": "bitmap", "ib": len(ibuf), "v": "f32"}, ibuf + bytes(4 * n))
    elif kind == 3:   # gaps summing past the model
        ibuf, n = bytes([0x80 | 0x7F, 0x7F]) * 20, 20
    else:             # a gap of 0 after the first: a duplicate index
        ibuf, n = b"\x05\x00", 2
    return push_v2(session, version, {"n": n, "i": "varint", "ib": len(ibuf), "v": "f32"}, ibuf + bytes(4 * n))


def v1_shapes(rng, session: str, version: int, n_params: int) -> list:
    shape = _pick(rng, [[0, 2 ** 70], [0] * 70, [2 ** 32, 2 ** 32], [-1], [1.5], [[4]], "4", [2 ** 63], [0, -1]])
    meta = {"session": session, "seq": 0, "version": version, "loss": 0.5, "arrays": [["values", "<f4", shape]]}
    return [PREFIX.pack(b"EB", 1, 5) + json.dumps(meta).encode(), b""]


def frame_counts(rng, session: str, version: int, n_params: int) -> list:
    """A v2 push with no payload frame, two of them, or up to 200 frames."""
    frames = push_v2(session, version, {"n": 1, "i": "none", "ib": 0, "v": "f32"}, bytes(4))
    count = int(_pick(rng, [0, 2, 3, 5, 200]))
    return frames[:1] + [bytes(4)] * count


CATEGORIES = {"v2-enc": v2_enc, "v2-sizes": v2_sizes, "v2-zstd": v2_zstd, "v2-index": v2_index,
              "v1-shapes": v1_shapes, "frame-counts": frame_counts}
