"""numpy ``.npz`` archives: samples and labels under named arrays (default ``x`` / ``y``, optional
``users``), read lazily where the archive allows.

An archive written by ``np.savez`` stores each array uncompressed: ``load_npz`` then maps the samples
array read-only (``np.memmap`` at the member's offset inside the zip), and ``read_rows`` reads an
agent's rows with ``pread``, so its memory is O(its shard) (``benchmarks/bench_data_shard.py``). ``np.savez_compressed`` archives must be decompressed, so they
are read whole.
"""
from __future__ import annotations

import struct
import tokenize
import zipfile
import zlib
from pathlib import Path
from typing import Optional

import numpy as np

from . import DatasetError, bounded
from .arrayset import ArraySet


# What numpy's and zipfile's readers raise on a damaged member (the .npy header is parsed with tokenize).
DAMAGED = (ValueError, zipfile.BadZipFile, EOFError, OSError, SyntaxError, tokenize.TokenError, zlib.error,
           NotImplementedError, struct.error)


def _member_layout(path: Path, zf: zipfile.ZipFile, member: str):
    """``(offset, shape, fortran_order, dtype)`` of an uncompressed ``.npy`` member's data inside the
    zip, or None when it is compressed (or in a layout not read in place)."""
    info = zf.getinfo(member)
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        head = f.read(30)
        if head[:4] != b"PK\x03\x04":
            return None
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        f.seek(info.header_offset + 30 + name_len + extra_len)
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            return None   # format 3.0 (utf-8 field names): read whole
        if dtype.hasobject:
            raise DatasetError(f"{path}: {member} holds Python objects; store numbers only")
        return f.tell(), shape, fortran, dtype


def _member_memmap(path: Path, zf: zipfile.ZipFile, member: str) -> Optional[np.ndarray]:
    """The ``.npy`` member mapped read-only, or None when it is compressed (or not mappable)."""
    layout = _member_layout(path, zf, member)
    if layout is None:
        return None
    offset, shape, fortran, dtype = layout
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def read_rows(path: str | Path, key: str, indices) -> np.ndarray:
    """Rows ``indices`` of array ``key`` in an ``.npz``, in the order given. For an uncompressed,
    C-ordered member each run of consecutive rows is one ``os.pread`` into the result, so the process
    holds only the rows read (no mapping of the file: a file map would count the page cache's large
    folios around each row as resident, see benchmarks/bench_data_shard.py); otherwise the member is
    read whole and indexed."""
    import os
    path = Path(path)
    idx = np.asarray(indices, dtype=np.int64)
    try:
        with zipfile.ZipFile(path) as zf:
            member = f"{key}.npy"
            if member not in zf.namelist():
                raise DatasetError(f"{path}: no array named {key!r}")
            layout = _member_layout(path, zf, member)
            if layout is None or layout[2]:
                return np.ascontiguousarray(_array(path, zf, key, False)[idx])
    except DAMAGED as err:
        raise DatasetError(f"{path}: damaged array ({type(err).__name__}: {err}); rewrite it with np.savez") from None
    offset, shape, _, dtype = layout
    if len(idx) and (idx.min() < 0 or idx.max() >= shape[0]):
        raise DatasetError(f"{path}: rows {int(idx.min())}..{int(idx.max())} asked, {key!r} has {shape[0]}")
    row = int(np.prod(shape[1:])) * dtype.itemsize
    order = np.argsort(idx, kind="stable")
    srt = idx[order]
    out = np.empty((len(idx), *shape[1:]), dtype=dtype)
    if row == 0 or len(idx) == 0:
        return out
    in_order = bool(np.all(order == np.arange(len(idx))))      # shards are sorted: read in place
    dst = out.reshape(len(idx), -1).view(np.uint8).reshape(len(idx), row)
    tmp = dst if in_order else np.empty((len(idx), row), np.uint8)
    breaks = np.flatnonzero(np.diff(srt) != 1) + 1
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        for run in np.split(srt, breaks):
            got = os.preadv(fd, [memoryview(tmp[pos:pos + len(run)]).cast("B")], offset + int(run[0]) * row)
            if got != len(run) * row:
                raise DatasetError(f"{path}: {key!r} ends early (truncated?); rewrite it with np.savez")
            pos += len(run)
    finally:
        os.close(fd)
    if not in_order:
        dst[order] = tmp
    return out


def _array(path: Path, zf: zipfile.ZipFile, key: str, lazy: bool) -> np.ndarray:
    member = f"{key}.npy"
    if member not in zf.namelist():
        have = sorted(n[:-4] for n in zf.namelist() if n.endswith(".npy"))
        raise DatasetError(f"{path}: no array named {key!r} (has {have}); set dataset.x_key / y_key to "
                           "the names your archive uses")
    if lazy:
        m = _member_memmap(path, zf, member)
        if m is not None:
            return m
    info = zf.getinfo(member)     # read whole: its declared size, and the header's, under the byte limit
    bounded.check(info.file_size, "bytes", f"{path}:{member}", "declared size")
    with zf.open(member) as f:
        version = np.lib.format.read_magic(f)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        shape, _, dtype = read_header(f) if read_header else ((0,), None, np.dtype(np.uint8))
        if dtype.hasobject:
            raise DatasetError(f"{path}: {member} holds Python objects; store numbers only")
        if int(np.prod(shape, dtype=object)) * dtype.itemsize > info.file_size:
            raise DatasetError(f"{path}: {member}'s header declares shape {shape} of {dtype}, more than the "
                               f"member's {info.file_size:,} bytes; the file is damaged, rewrite it with np.savez")
    with zf.open(member) as f:
        return np.lib.format.read_array(f, allow_pickle=False)


def load_npz(path: str | Path, x_key: str = "x", y_key: str = "y", users_key: Optional[str] = None,
             classes: Optional[list[str]] = None, lazy: bool = True) -> ArraySet:
    """The arrays ``x_key`` (samples) and ``y_key`` (int labels) of an ``.npz``; ``classes`` default
    to ``"0" .. str(max label)``. ``lazy``: map an uncompressed ``x`` instead of reading it."""
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except DAMAGED as err:
        raise DatasetError(f"{path}: not a readable .npz ({err}); write it with np.savez(path, x=..., y=...)") from None
    with zf:
        try:
            x = _array(path, zf, x_key, lazy)
            y = _array(path, zf, y_key, False)
            users = _array(path, zf, users_key, False) if users_key else None
        except DAMAGED as err:
            raise DatasetError(f"{path}: damaged array ({type(err).__name__}: {err}); rewrite it with "
                               "np.savez") from None
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise DatasetError(f"{path}: {y_key!r} is {y.dtype} {tuple(y.shape)}; labels must be integers (N,)")
    y = y.astype(np.int64)
    if classes is None:
        classes = [str(i) for i in range(bounded.classes_of(y, path, f"labels {y_key!r}"))]
    if users is not None:
        users, user_names = _user_index(users)
        return ArraySet(x, y, classes, users, user_names)
    return ArraySet(x, y, classes)


def _user_index(users: np.ndarray) -> tuple[np.ndarray, list[str]]:
    names, idx = np.unique(users, return_inverse=True)
    return idx.astype(np.int64), [str(n) for n in names]
