"""Compact encodings of updates and models (wire version 2), chosen per message by size.

An update is (values float32, indices uint32 ascending | None for dense). Packed into one byte string:

    [index section: ``ib`` bytes][value section][… all of it zstd-compressed when that is smaller]

- indices ``varint``: the first index, then the gaps to the previous one, LEB128 (7 bits a byte);
  ``bitmap``: bit k (little-endian bit order) set for every sent index k, up to the largest one;
  ``none``: dense. ``auto`` takes whichever of varint/bitmap is smaller for this message.
- values ``f32``; ``f16`` (unscaled gradients only: lr·g falls into fp16's subnormal range, and a
  message with a value beyond fp16's range falls back to f32); ``bf16`` (float32's exponent, 8 bits of
  mantissa, round-to-nearest-even); ``q8``: per-segment uint32 counts and float32 scales, then int8
  codes — value = code · scale of its segment (``compression.ops.quantize_q8``).

The header describes it as ``enc`` = {"n": entries, "i": index coding, "ib": index bytes, "v": value
coding, "s": q8 segments, "z": unpacked size if zstd-compressed else 0}. Decoding checks the header
before it unpacks a byte (``check_enc``: known codings; entries, segments and the index section within
what a model of the receiver's size can need; the zstd size equal to the sections), decompresses into
a buffer of exactly that size (``unzstd``), then checks every length and raises ``CodecError``; range
checks of the values against Θ stay with the PS.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

try:   # optional: pip install 'edgebed[zstd]'
    import zstandard
except ImportError:   # pragma: no cover - depends on the environment
    zstandard = None

INDEX_CODINGS = ("auto", "varint", "bitmap")
VALUE_CODINGS = ("f32", "f16", "bf16")
FP16_MAX = 65504.0
MAX_VARINT_BYTES = 5   # a uint32 gap needs at most 5 LEB128 bytes


class CodecError(ValueError):
    pass


@dataclass(frozen=True)
class Codec:
    """How a sender packs its updates (or the PS its models): chosen in the scenario, never on the wire."""
    values: str = "f32"       # f32 | f16 | bf16 (q8 payloads are always sent as q8)
    indices: str = "auto"     # auto | varint | bitmap
    zstd: bool = False        # compress the packed bytes when that makes them smaller

    def __post_init__(self):
        if self.values not in VALUE_CODINGS:
            raise ValueError(f"value coding {self.values!r}: use one of {', '.join(VALUE_CODINGS)}")
        if self.indices not in INDEX_CODINGS:
            raise ValueError(f"index coding {self.indices!r}: use one of {', '.join(INDEX_CODINGS)}")
        if self.zstd and zstandard is None:
            raise ValueError("zstd needs the zstandard package: pip install 'edgebed[zstd]'")


# -- varint (LEB128) -----------------------------------------------------------------------------
def varint_sizes(u: np.ndarray) -> np.ndarray:
    """Bytes of each LEB128-encoded uint: 1 + number of 7-bit groups above the first."""
    u = u.astype(np.uint64, copy=False)
    n = np.ones(u.size, dtype=np.int64)
    for k in range(1, MAX_VARINT_BYTES + 5):
        more = u >= np.uint64(1 << (7 * k))
        if not more.any():
            break
        n += more
    return n


def varint_encode(u: np.ndarray) -> np.ndarray:
    u = u.astype(np.uint64, copy=False)
    sizes = varint_sizes(u)
    starts = np.cumsum(sizes) - sizes
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    for k in range(int(sizes.max()) if u.size else 0):
        m = sizes > k
        cont = (sizes[m] > k + 1).astype(np.uint8) << 7
        out[starts[m] + k] = ((u[m] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8) | cont
    return out


def varint_decode(buf: np.ndarray, count: int) -> np.ndarray:
    """``count`` LEB128 uints (each ≤ 5 bytes) filling ``buf`` exactly → uint64."""
    if count == 0:
        if buf.size:
            raise CodecError("varint section has bytes but no entries")
        return np.zeros(0, dtype=np.uint64)
    ends = np.flatnonzero(buf < 0x80)
    if ends.size != count or ends[-1] != buf.size - 1:
        raise CodecError(f"varint section holds {ends.size} complete numbers in {buf.size} bytes, "
                         f"header says {count}")
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if int(lengths.max()) > MAX_VARINT_BYTES:
        raise CodecError(f"a varint of {int(lengths.max())} bytes (at most {MAX_VARINT_BYTES} for uint32)")
    shift = (np.arange(buf.size, dtype=np.int64) - np.repeat(starts, lengths)) * 7
    contrib = (buf & 0x7F).astype(np.uint64) << shift.astype(np.uint64)
    return np.add.reduceat(contrib, starts)


# -- indices -------------------------------------------------------------------------------------
def _gaps(idx: np.ndarray) -> np.ndarray:
    g = np.empty(idx.size, dtype=np.uint64)
    if idx.size:
        g[0] = idx[0]
        np.subtract(idx[1:], idx[:-1], out=g[1:], dtype=np.int64, casting="unsafe")
    return g


def index_sizes(idx: np.ndarray) -> dict[str, int]:
    """Bytes each index coding would take for these (sorted) indices: the size model."""
    bitmap = (int(idx[-1]) + 8) // 8 if idx.size else 0
    return {"varint": int(varint_sizes(_gaps(idx)).sum()), "bitmap": bitmap}


def encode_indices(idx: np.ndarray, how: str) -> tuple[str, np.ndarray]:
    if idx.size > 1 and not bool(np.all(idx[1:] > idx[:-1])):
        raise CodecError("indices must be strictly increasing to be delta-encoded")
    if how == "auto":
        sizes = index_sizes(idx)
        how = min(("varint", "bitmap"), key=sizes.__getitem__)
    if how == "varint":
        return how, varint_encode(_gaps(idx))
    bits = np.zeros((int(idx[-1]) + 8) // 8 * 8 if idx.size else 0, dtype=bool)
    bits[idx] = True
    return how, np.packbits(bits, bitorder="little")


def decode_indices(how: str, buf: np.ndarray, count: int) -> np.ndarray:
    if how == "varint":
        idx = np.cumsum(varint_decode(buf, count), dtype=np.uint64)
        if idx.size and int(idx[-1]) >= 1 << 32:
            raise CodecError("index beyond uint32")
        return idx.astype(np.uint32)
    if how == "bitmap":
        nz = np.flatnonzero(buf)   # expand only the non-zero bytes: memory bounded by the entry count
        if nz.size > count:
            raise CodecError(f"bitmap sets more than the {count} indices the header announces")
        bits = np.unpackbits(buf[nz][:, None], axis=1, bitorder="little")
        rows, cols = np.nonzero(bits)
        if rows.size != count:
            raise CodecError(f"bitmap sets {rows.size} indices, header says {count}")
        idx = nz[rows].astype(np.int64) * 8 + cols
        if idx.size and int(idx[-1]) >= 1 << 32:
            raise CodecError("index beyond uint32")
        return idx.astype(np.uint32)
    raise CodecError(f"unknown index coding {how!r}")


# -- values --------------------------------------------------------------------------------------
def bf16_bits(v: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def encode_values(v: np.ndarray, how: str, q8=None) -> tuple[str, int, np.ndarray]:
    """→ (coding used, q8 segments, bytes). f16 falls back to f32 for a message beyond fp16's range."""
    if q8 is not None:
        codes, scales, counts = q8
        head = np.concatenate([counts.astype("<u4").view(np.uint8), scales.astype("<f4").view(np.uint8)])
        return "q8", int(counts.size), np.concatenate([head, codes.astype(np.int8).view(np.uint8)])
    if how == "f16" and v.size and float(np.abs(v).max()) > FP16_MAX:
        how = "f32"
    if how == "f16":
        return how, 0, v.astype("<f2").view(np.uint8)
    if how == "bf16":
        return how, 0, bf16_bits(v).astype("<u2").view(np.uint8)
    return "f32", 0, np.ascontiguousarray(v, dtype="<f4").view(np.uint8)


def decode_values(how: str, buf: np.ndarray, count: int, segments: int) -> np.ndarray:
    width = {"f32": 4, "f16": 2, "bf16": 2}.get(how)
    if how == "q8":
        head = 8 * segments
        if buf.size != head + count:
            raise CodecError(f"q8 section of {buf.size} bytes, expected {head + count} for {count} entries")
        counts = buf[:4 * segments].view("<u4").astype(np.int64)
        scales = buf[4 * segments:head].view("<f4").astype(np.float32)
        if int(counts.sum()) != count:
            raise CodecError(f"q8 segment counts sum to {int(counts.sum())}, header says {count}")
        return buf[head:].view(np.int8).astype(np.float32) * np.repeat(scales, counts)
    if width is None:
        raise CodecError(f"unknown value coding {how!r}")
    if buf.size != width * count:
        raise CodecError(f"{how} section of {buf.size} bytes for {count} entries")
    if how == "bf16":
        return bf16_values(buf.view("<u2"))
    return buf.view("<f2" if how == "f16" else "<f4").astype(np.float32)


# -- whole updates -------------------------------------------------------------------------------
def encode_update(values: np.ndarray, indices: Optional[np.ndarray], codec: Codec, q8=None) -> tuple[dict, np.ndarray]:
    """→ (enc header dict, payload uint8). ``q8``: (codes, scales, counts) from a q8 compressor."""
    if indices is None:
        icode, ibuf = "none", np.zeros(0, dtype=np.uint8)
    else:
        icode, ibuf = encode_indices(np.asarray(indices), codec.indices)
    vcode, segs, vbuf = encode_values(np.asarray(values), codec.values, q8)
    payload = np.concatenate([ibuf, vbuf])
    enc = {"n": int(np.asarray(values).size), "i": icode, "ib": int(ibuf.size), "v": vcode, "s": segs, "z": 0}
    if codec.zstd:
        packed = zstandard.ZstdCompressor(level=3).compress(payload.tobytes())
        if len(packed) < payload.size:
            enc["z"] = int(payload.size)
            payload = np.frombuffer(packed, dtype=np.uint8)
    return enc, payload


_ENC_KEYS = {"n", "i", "ib", "v", "s", "z", "b"}
_INDEX_WIRE = ("none", "varint", "bitmap")   # enc["i"] a receiver accepts
_VALUE_WIRE = {"f32": 4, "f16": 2, "bf16": 2, "q8": 1}   # enc["v"] → bytes per value (q8: + 8 a segment)


def value_bytes(how: str, count: int, segments: int) -> int:
    """Bytes of the value section ``enc`` announces: what the payload must hold after the index section."""
    return _VALUE_WIRE[how] * count + (8 * segments if how == "q8" else 0)


def check_enc(enc, max_bytes: int, max_entries: Optional[int] = None) -> tuple[int, int, str, str, int, int]:
    """The ``enc`` header of a v2 payload, checked before a byte of it is unpacked: known codings,
    non-negative integer sizes, at most ``max_entries`` entries (the receiver's model size; None: bounded
    by ``max_bytes``), an index section no larger than that many entries can need, and (zstd) an unpacked
    size equal to the index plus the value section. → (n, ib, i, v, s, z); CodecError otherwise."""
    if type(enc) is not dict or not {"n", "i", "ib", "v"} <= enc.keys() or enc.keys() - _ENC_KEYS:
        raise CodecError(f"enc must hold n, i, ib, v (and s, z, b), got {_short(enc)}")
    n, ib, segs, z, how_i, how_v = enc["n"], enc["ib"], enc.get("s", 0), enc.get("z", 0), enc["i"], enc["v"]
    if not all(type(x) is int and x >= 0 for x in (n, ib, segs, z)):
        raise CodecError("enc n, ib, s, z must be non-negative integers")
    if type(how_i) is not str or how_i not in _INDEX_WIRE:
        raise CodecError(f"unknown index coding {_short(how_i)}: one of {', '.join(_INDEX_WIRE)}")
    if type(how_v) is not str or how_v not in _VALUE_WIRE:
        raise CodecError(f"unknown value coding {_short(how_v)}: one of {', '.join(_VALUE_WIRE)}")
    limit = max_bytes if max_entries is None else max_entries
    if n > limit:
        raise CodecError(f"{n} entries, at most {limit} "
                         + ("(the message size limit)" if max_entries is None else "(the model's size)"))
    if how_v != "q8" and segs or segs > limit:   # a segment per layer tensor: never more than entries in Θ
        raise CodecError(f"{segs} q8 segments in {how_v} values of a model of {limit} entries")
    if how_i == "none" and ib:
        raise CodecError("dense payload with an index section")
    # The most bytes n indices can take: 5 a varint gap, or a bitmap up to the largest index there is.
    if how_i == "varint" and ib > MAX_VARINT_BYTES * n or how_i == "bitmap" and ib > (limit + 7) // 8:
        raise CodecError(f"{how_i} index section of {ib} bytes, more than {n} entries of a model of "
                         f"{limit} can need")
    unpacked = ib + value_bytes(how_v, n, segs)
    if unpacked > max_bytes:
        raise CodecError(f"payload unpacks to {unpacked} bytes, over the limit of {max_bytes}")
    if z and z != unpacked:
        raise CodecError(f"zstd payload declared to unpack to {z} bytes; its sections take {unpacked}")
    return n, ib, how_i, how_v, segs, z


def _short(x) -> str:
    r = repr(x)
    return r if len(r) <= 80 else r[:77] + "..."


def unzstd(data, size: int) -> np.ndarray:
    """A zstd frame → exactly ``size`` bytes, never more in memory: its declared content size checked
    first (python-zstandard ignores ``max_output_size`` when the frame declares one, and allocates it),
    then streamed into a ``size``-byte buffer with the window capped to it (a frame may ask for a
    window of gigabytes)."""
    if zstandard is None:
        raise CodecError("zstd-compressed payload, but this side has no zstandard package: "
                         "pip install 'edgebed[zstd]' or send without zstd")
    try:
        declared = zstandard.frame_content_size(data)
        if declared not in (-1, size):
            raise CodecError(f"zstd frame declares {declared} bytes, header says {size}")
        window = 1 << max(10, (size - 1).bit_length())
        raw, got = bytearray(size + 1), 0   # one byte more than allowed: tells "more" from "exactly"
        with zstandard.ZstdDecompressor(max_window_size=window).stream_reader(data) as reader:
            view = memoryview(raw)
            while got <= size and (k := reader.readinto(view[got:])):
                got += k
    except zstandard.ZstdError as err:
        raise CodecError(f"zstd: {err}") from None
    if got != size:
        raise CodecError(f"zstd payload unpacks to {'more than ' if got > size else ''}"
                         f"{min(got, size)} bytes, header says {size}")
    return np.frombuffer(raw, dtype=np.uint8, count=size)


def decode_update(enc, payload: np.ndarray, max_bytes: int,
                  max_entries: Optional[int] = None) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """(enc, payload) → (values float32, indices uint32 | None); CodecError on anything inconsistent.
    Every size is checked (``check_enc``) before anything is unpacked, so nothing expands beyond the
    sections the header announces, bounded by ``max_entries`` and ``max_bytes``."""
    n, ib, how_i, how_v, segs, z = check_enc(enc, max_bytes, max_entries)
    if z:
        payload = unzstd(payload.data if payload.flags.c_contiguous else payload.tobytes(), z)
    if ib > payload.size:
        raise CodecError(f"index section of {ib} bytes in a payload of {payload.size}")
    indices = None if how_i == "none" else decode_indices(how_i, payload[:ib], n)
    return decode_values(how_v, payload[ib:], n, segs), indices
