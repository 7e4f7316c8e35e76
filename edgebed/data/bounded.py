"""The one bounded reader for untrusted files: every data set, trace and pickle a scenario names is
read through here, against budgets checked before anything of the file's declared size is allocated.

Limits (``LIMITS``; each raised for a legitimate file by the environment variable
``EDGEBED_LIMIT_<NAME>``, e.g. ``EDGEBED_LIMIT_CLASSES=200000``; sizes accept ``KiB``/``MiB``/``GiB``):

| name | default | bounds |
|---|---|---|
| ``bytes`` | 1 GiB | one file, or one archive member, read into memory whole (JSON, CSV trace, pickle, tar member, IDX) |
| ``members`` | 10,000 | members of an archive looked through (CIFAR ``.tar.gz``) |
| ``rows`` | 1,000,000 | rows of a trace (CSV / JSON rows; FedScale / FLASH availability changes after unrolling) |
| ``classes`` | 100,000 | classes a label column implies (largest label + 1; string labels: distinct names) |
| ``depth`` | 64 | nesting of a pickle's containers (JSON deeper than Python's decoder follows is refused too) |
| ``pixels`` | 33,554,432 | pixels of one image, checked from its header before it is decoded |
| ``nodes`` | 20,000,000 | containers and values a pickle check visits (each shared object once) |
| ``time_s`` | 1e9 | a trace time in seconds (about 31 years); positive times below ``resolution`` refused |
| ``value`` | 1e12 | a trace rate or multiplier (kbit/s, ms per sample, slowdown) |
| ``resolution`` | 1e-6 | the smallest positive trace time, period or rate (a floor: lowered, not raised) |

A file over a limit raises ``LimitError`` (a ``DatasetError``; trace readers raise its subclass that
is also a ``TraceError``), naming the file, the field, the limit and the variable that raises it.
"""
from __future__ import annotations

import gzip
import io
import os
import re
import sys
import tarfile
from pathlib import Path
from typing import Any, BinaryIO, Type

import numpy as np

from . import DatasetError

LIMITS: dict[str, float] = {
    "bytes": 1 << 30, "members": 10_000, "rows": 1_000_000, "classes": 100_000, "depth": 64,
    "pixels": 1 << 25, "nodes": 20_000_000, "time_s": 1e9, "value": 1e12, "resolution": 1e-6,
}
FLOORS = ("resolution",)      # limits a value must not fall below (the others: not exceed)
_UNITS = {"": 1, "k": 1000, "kib": 1 << 10, "kb": 1000, "m": 10**6, "mib": 1 << 20, "mb": 10**6,
          "gib": 1 << 30, "gb": 10**9}


class LimitError(DatasetError):
    """An untrusted file over one of the reader's budgets: ``file``, ``field``, ``limit`` (its name)."""

    def __init__(self, file: Any, field: str, limit: str, found: str):
        self.file, self.field, self.limit = str(file), field, limit
        side, change = ("under", "lower it with the environment variable {}=<smaller>") if limit in FLOORS \
            else ("over", "raise it with the environment variable {}=<larger>")
        super().__init__(f"{file}: {field} {found}, {side} the limit {limit}={_show(limit, get(limit))}; if "
                         f"the file is legitimate, {change.format(env_name(limit))} (docs/data.md, 'Limits')")

    def __reduce__(self):     # crosses process boundaries (executors pickle exceptions) intact
        return _rebuilt, (type(self), str(self), self.file, self.field, self.limit)


def _rebuilt(cls: type, message: str, file: str, field: str, limit: str) -> LimitError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.file, err.field, err.limit = file, field, limit
    return err


def env_name(limit: str) -> str:
    return f"EDGEBED_LIMIT_{limit.upper()}"


def _show(limit: str, v: float) -> str:
    if limit == "bytes" and v >= 1 << 20:
        return f"{v / (1 << 20):g} MiB"
    return f"{int(v):,}" if float(v).is_integer() and abs(v) < 1e15 else f"{v:g}"


def get(limit: str) -> float:
    """The limit in force: ``EDGEBED_LIMIT_<NAME>`` if set (read now, so a test or a run may set it),
    else the default."""
    raw = os.environ.get(env_name(limit))
    if raw is None or not raw.strip():
        return LIMITS[limit]
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", raw)
    if not m or m.group(2).lower() not in _UNITS:
        raise DatasetError(f"{env_name(limit)}={raw!r} is not a number (sizes may end in KiB, MiB, GiB)")
    try:
        v = float(m.group(1)) * _UNITS[m.group(2).lower()]
    except ValueError:
        raise DatasetError(f"{env_name(limit)}={raw!r} is not a number") from None
    if not v > 0:
        raise DatasetError(f"{env_name(limit)}={raw!r} must be positive")
    return v


def environment() -> dict[str, str]:
    """The ``EDGEBED_LIMIT_*`` variables set here, for processes that don't inherit this environment
    (containers), so an agent reads a file under the limits ``validate`` checked."""
    return {k: v for k, v in os.environ.items() if k.startswith("EDGEBED_LIMIT_")}


def check(n: float, limit: str, file: Any, field: str, error: Type[LimitError] = LimitError,
          what: str = "") -> None:
    """Refuse ``n`` over limit ``limit`` (before allocating what ``n`` counts)."""
    if n > get(limit):
        raise error(file, field, limit, what or f"is {_show(limit, n)}")


# --- bytes ---------------------------------------------------------------------------------------

def read_stream(f: BinaryIO, file: Any, field: str = "size", error: Type[LimitError] = LimitError) -> bytes:
    """All of ``f``, read in chunks and refused as soon as it passes the ``bytes`` limit (a gzip or
    tar member's real size is known only by reading it)."""
    cap = int(get("bytes"))
    out = io.BytesIO()
    while True:
        chunk = f.read(min(1 << 20, cap + 1 - out.tell()))
        if not chunk:
            return out.getvalue()
        out.write(chunk)
        if out.tell() > cap:
            raise error(file, field, "bytes", "is larger (reading stopped there)")


def read_bytes(path: str | Path, error: Type[LimitError] = LimitError) -> bytes:
    """The bytes of ``path`` (gunzipped for ``.gz``), under the ``bytes`` limit; the file's size is
    checked before it is read."""
    path = Path(path)
    check(path.stat().st_size, "bytes", path, "size", error)
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return read_stream(f, path, "size after gunzip", error)
    with open(path, "rb") as f:
        raw = f.read()                 # one allocation of the size just checked
    check(len(raw), "bytes", path, "size", error)    # the file grew while it was read
    return raw


def loads_json(path: str | Path, plain: Type[Exception] = DatasetError, error: Type[LimitError] = LimitError) -> Any:
    """The JSON document in ``path`` under the ``bytes`` limit (``error`` beyond it); an unreadable file,
    or nesting beyond what Python's decoder recurses into, is ``plain``; both name the file."""
    import json
    raw = read_bytes(path, error)
    try:
        return json.loads(raw)
    except RecursionError:   # the C decoder stops at the interpreter's recursion limit (about 1,000 levels)
        raise plain(f"{path}: nested deeper than Python's JSON decoder follows ({sys.getrecursionlimit():,} "
                    "levels); no data-set or trace file nests so deep — the file is damaged or crafted") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise plain(f"{path}: not readable JSON ({err})") from None


def tar_member(path: Path, name: str, missing: str) -> bytes:
    """Member ``name`` of the tarball ``path``, refused by its declared size before it is read and
    by its streamed size while it is (``bytes``); at most ``members`` headers are looked through."""
    try:
        with tarfile.open(path) as tar:
            member, seen = None, 0
            for m in tar:     # headers only: a member's data is skipped, not decompressed into memory
                seen += 1
                check(seen, "members", path, "members", what="has more")
                if m.name == name:
                    member = m
                    break
            if member is None:
                raise DatasetError(missing)
            check(member.size, "bytes", f"{path}:{name}", "declared size")
            f = tar.extractfile(member)
            if f is None:
                raise DatasetError(f"{path}: {name} is not a regular file")
            return read_stream(f, f"{path}:{name}", "size")
    except (tarfile.TarError, OSError, EOFError) as err:
        raise DatasetError(f"{path}: damaged tarball ({err}); re-download it") from None


# --- labels and values ---------------------------------------------------------------------------

def classes_of(y: np.ndarray, file: Any, field: str = "labels") -> int:
    """How many classes labels ``y`` imply (largest + 1), refused beyond the ``classes`` limit and for
    negative labels — before a list of class names that long is built."""
    if not len(y):
        return 0
    lo, hi = int(np.min(y)), int(np.max(y))
    if lo < 0:
        raise DatasetError(f"{file}: {field} hold {lo}; labels are class indices 0, 1, ...")
    check(hi + 1, "classes", file, field, what=f"imply {hi + 1:,} classes (largest label {hi:,})")
    return hi + 1


def require_finite(x: np.ndarray, file: Any, field: str = "samples", chunk: int = 4096) -> None:
    """Refuse samples holding NaN or ±Inf (read ``chunk`` rows at a time, so a memmap stays unread
    but for the rows in hand)."""
    if x.dtype.kind not in "fc":
        return
    for i in range(0, len(x), chunk):
        b = np.asarray(x[i:i + chunk])
        if not np.isfinite(b).all():
            row = i + int(np.flatnonzero(~np.isfinite(b.reshape(len(b), -1)).all(axis=1))[0])
            raise DatasetError(f"{file}: {field} row {row} holds NaN or Inf; a model can't train on it — "
                               "fix or drop that sample")


def trace_value(x: float, file: Any, field: str, limit: str, error: Type[LimitError] = LimitError) -> float:
    """A trace time (``limit`` ``time_s``) or rate (``value``): at most the limit, and 0 (times only) or
    at least ``resolution`` — a 1e-300 s period or a 1e308 kbit/s link is a damaged file."""
    check(x, limit, file, field, error, what=f"is {x:g}")
    if 0 < x < get("resolution"):
        raise error(file, field, "resolution", f"is {x:g}, a positive value below the smallest step")
    return x


# --- images --------------------------------------------------------------------------------------

def open_image(src, file: Any):
    """Pillow's image of ``src`` (a path or a file object), opened lazily and refused when its header
    declares more than ``pixels`` pixels; Pillow's own bomb check uses the same limit."""
    import warnings
    from PIL import Image
    cap = int(get("pixels"))
    Image.MAX_IMAGE_PIXELS = cap
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im = Image.open(src)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise LimitError(file, "image size", "pixels", f"is declared larger ({err})") from None
    w, h = im.size
    if w * h > cap:
        im.close()
        raise LimitError(file, "image size", "pixels", f"is {w}×{h} = {w * h:,} pixels")
    return im


# --- pickles -------------------------------------------------------------------------------------

def walk(obj: Any, file: Any, visit, error: Type[LimitError] = LimitError,
         plain: Type[Exception] = DatasetError) -> None:
    """Call ``visit(value)`` on ``obj`` and everything it contains, each object once however many
    references share it (``nodes`` counts objects, not paths: a 626-byte pickle of 2^60 paths costs
    60 visits), at most ``depth`` deep; a container holding itself is refused (``plain``)."""
    max_nodes, max_depth = get("nodes"), get("depth")
    done: set[int] = set()
    open_: set[int] = set()
    stack: list[tuple[Any, int, bool]] = [(obj, 0, False)]
    nodes = 0
    while stack:
        o, depth, leaving = stack.pop()
        if leaving:
            open_.discard(id(o))
            done.add(id(o))
            continue
        if id(o) in open_:
            raise plain(f"{file}: a {type(o).__name__} contains itself; a data file holds no cycles "
                        "(the file is damaged or crafted)")
        if id(o) in done:
            continue
        nodes += 1
        if nodes > max_nodes:
            raise error(file, "objects", "nodes", "are more")
        if depth > max_depth:
            raise error(file, "nesting", "depth", f"is deeper than {int(max_depth)}")
        visit(o)
        if isinstance(o, dict):
            children = [*o.keys(), *o.values()]
        elif isinstance(o, (list, tuple, set, frozenset)):
            children = list(o)
        else:
            done.add(id(o))
            continue
        open_.add(id(o))
        stack.append((o, depth, True))
        stack.extend((c, depth + 1, False) for c in children)
