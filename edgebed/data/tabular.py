"""Parquet and Arrow tables (the on-disk forms of Hugging Face ``datasets``): an image column, a label
column and an optional user column, read by row selection.

The image column may hold encoded images (``binary``, or Hugging Face's ``Image`` feature, a struct
``{bytes, path}``) decoded with Pillow, or nested numeric lists (``list<...>`` of pixel values, or a
fixed-size list) reshaped to ``shape``. Labels are integers, or strings mapped to sorted class names.
Class names come from Hugging Face's ``ClassLabel`` metadata when the file carries it.
``TableReader.labels()`` reads the label (and user) column only; ``take(indices)`` reads only the
Parquet row groups that hold those rows, so an agent decodes its own shard, not the set.
Arrow files: the IPC file format, or the stream format ``datasets.save_to_disk`` writes.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from . import DatasetError, bounded
from .arrayset import ArraySet
from .imagefolder import decode_image


def _open_table(path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    if path.suffix == ".parquet" or path.is_dir():
        try:
            return pq.ParquetFile(path) if path.is_file() else pq.read_table(path)
        except (OSError, pa.ArrowException, ValueError) as err:
            raise DatasetError(f"{path}: not a readable Parquet file ({err})") from None
    try:
        with pa.memory_map(str(path)) as src:
            try:
                return pa.ipc.open_file(src).read_all()
            except pa.ArrowInvalid:
                pass
        with pa.memory_map(str(path)) as src:
            return pa.ipc.open_stream(src).read_all()
    except (OSError, pa.ArrowException, ValueError) as err:
        raise DatasetError(f"{path}: not a readable Arrow file (IPC file or stream) nor .parquet ({err})") from None


def _is_list(t) -> bool:
    import pyarrow as pa
    return pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t)


class TableReader:
    """One Parquet / Arrow table read as an ``ArraySet``, column by column and row group by row group."""

    def __init__(self, path: str | Path, image_column: str = "image", label_column: str = "label",
                 user_column: Optional[str] = None, shape: Optional[Sequence[int]] = None,
                 channels: Optional[int] = None, size: Optional[tuple[int, int]] = None):
        self.path = Path(path)
        if not self.path.exists():
            raise DatasetError(f"{self.path}: no such file")
        self.src = _open_table(self.path)
        try:
            self.schema = self.src.schema_arrow if hasattr(self.src, "schema_arrow") else self.src.schema
        except ValueError as err:        # a damaged schema (e.g. a column name that is not UTF-8)
            raise DatasetError(f"{self.path}: unreadable schema ({err}); the file is damaged, rewrite it") from None
        names = self.schema.names
        for role, col in (("image", image_column), ("label", label_column), ("user", user_column)):
            if col is not None and col not in names:
                raise DatasetError(f"{self.path}: no {role} column {col!r} (columns: {names}); set "
                                   f"dataset.{role}_column")
        self.image_column, self.label_column, self.user_column = image_column, label_column, user_column
        self.shape, self.channels, self.size = shape, channels, size
        self._labels = self._classes = self._users = self._user_names = None

    def _column(self, name: str, rows: Optional[np.ndarray] = None):
        import pyarrow as pa
        try:
            return self._read_column(name, rows)
        except (OSError, pa.ArrowException, ValueError) as err:     # a damaged page, row group or block
            raise DatasetError(f"{self.path}: column {name!r} can't be read ({err}); the file is damaged, "
                               "rewrite it") from None

    def _read_column(self, name: str, rows: Optional[np.ndarray] = None):
        import pyarrow as pa
        # Parquet: one row group at a time, only those holding `rows`, on this thread (Arrow's thread pool
        # kept each group's decode buffers: +1.7 GiB for a 146 MiB set, benchmarks/bench_data_shard.py)
        if hasattr(self.src, "read_row_group"):
            md = self.src.metadata
            if rows is None:
                return self.src.read(columns=[name], use_threads=False).column(0)
            bounds = np.cumsum([0] + [md.row_group(g).num_rows for g in range(md.num_row_groups)])
            group_of = np.searchsorted(bounds, rows, side="right") - 1
            pieces = []
            for g in np.unique(group_of):
                part = self.src.read_row_group(int(g), columns=[name], use_threads=False).column(0)
                pieces.append(part.take(pa.array(rows[group_of == g] - bounds[g])).combine_chunks())
                del part                  # the group is dropped before the next one is read
            if not pieces:
                return pa.chunked_array([], type=self.schema.field(name).type)
            return pa.chunked_array(pieces)
        col = self.src.column(name)
        return col if rows is None else col.take(pa.array(rows))

    def _class_names_from_metadata(self) -> Optional[list[str]]:
        meta = self.schema.metadata or {}
        raw = meta.get(b"huggingface")
        if not raw:
            return None
        try:
            feat = json.loads(raw)["info"]["features"][self.label_column]
        except (KeyError, TypeError, ValueError):
            return None
        return list(feat["names"]) if isinstance(feat, dict) and "names" in feat else None

    def labels(self) -> np.ndarray:
        """All labels (int64), reading the label column only."""
        if self._labels is None:
            raw = self._column(self.label_column).to_numpy(zero_copy_only=False)
            names = self._class_names_from_metadata()
            if raw.dtype.kind in "iu":
                y = raw.astype(np.int64)
                n = bounded.classes_of(y, self.path, f"label column {self.label_column!r}")
                self._classes = names if names and len(names) >= n else [str(i) for i in range(n)]
            elif raw.dtype.kind in "OUS":
                self._classes, y = np.unique(raw.astype(str), return_inverse=True)
                bounded.check(len(self._classes), "classes", self.path, f"label column {self.label_column!r}",
                              what=f"holds {len(self._classes):,} distinct class names")
                self._classes = [str(c) for c in self._classes]
            else:
                raise DatasetError(f"{self.path}: label column {self.label_column!r} is {raw.dtype}; labels "
                                   "are integers or strings")
            self._labels = y.astype(np.int64)
            if self.user_column:
                u = self._column(self.user_column).to_numpy(zero_copy_only=False)
                names_u, idx = np.unique(u.astype(str), return_inverse=True)
                self._users, self._user_names = idx.astype(np.int64), [str(n) for n in names_u]
        return self._labels

    def __len__(self) -> int:
        return len(self.labels())

    def _decode(self, col, rows: np.ndarray) -> np.ndarray:
        import pyarrow as pa
        t = col.type
        where = f"{self.path}: column {self.image_column!r}"
        if pa.types.is_struct(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
            out = []
            for r, v in zip(rows, col.to_pylist()):
                raw = v.get("bytes") if isinstance(v, dict) else v
                if raw is None:
                    raise DatasetError(f"{where}, row {r}: no image bytes (an image stored only by path is "
                                       "not read; embed the bytes, e.g. datasets' cast_column(Image()))")
                out.append(decode_image(raw, self.channels, self.size, f"{where}, row {r}"))
                self.channels = out[-1].shape[0]
                if out[-1].shape != out[0].shape:
                    raise DatasetError(f"{where}, row {r}: image shape {out[-1].shape} differs from "
                                       f"{out[0].shape}; give dataset.size: [H, W]")
            return np.stack(out) if out else np.zeros((0,), np.uint8)
        if _is_list(t):
            arr = self._nested(col, where)
            if self.shape is not None:
                try:
                    arr = arr.reshape((len(arr), *self.shape))
                except ValueError:
                    raise DatasetError(f"{where}: {arr.shape[1:]} values per row do not reshape to "
                                       f"dataset.shape {list(self.shape)}") from None
            return arr if arr.dtype == np.uint8 else arr.astype(np.float32)
        raise DatasetError(f"{where} has type {t}; an image column holds encoded image bytes, "
                           "{bytes, path} structs, or nested lists of numbers")

    @staticmethod
    def _nested(col, where: str) -> np.ndarray:
        """Nested lists of numbers → one array ``(rows, d1, d2, ...)``, through Arrow's flat values
        (no Python objects per pixel); every row must have the same lengths."""
        import pyarrow.compute as pc
        arr = col.combine_chunks() if hasattr(col, "combine_chunks") else col
        n, dims, inner = len(arr), [], arr
        while _is_list(inner.type):
            if inner.null_count:
                raise DatasetError(f"{where}: a row holds no list (null); every sample needs its values")
            lengths = pc.list_value_length(inner).to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths != lengths[0]).any():
                raise DatasetError(f"{where}: rows hold lists of different lengths ({int(lengths.min())}.."
                                   f"{int(lengths.max())}); every sample needs one shape")
            dims.append(int(lengths[0]) if len(lengths) else 0)
            inner = inner.flatten()
        values = inner.to_numpy(zero_copy_only=False)
        if values.dtype.kind not in "iuf":
            raise DatasetError(f"{where}: nested lists of {values.dtype}; pixel values must be numbers")
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            k = int(np.flatnonzero(~np.isfinite(values))[0]) // max(1, int(np.prod(dims)))
            raise DatasetError(f"{where}: row {k} holds NaN or Inf; a model can't train on it — fix or drop that sample")
        return values.reshape((n, *dims))

    def take(self, indices: Sequence[int] | np.ndarray) -> ArraySet:
        """The rows ``indices`` (sorted internally, returned in the order given) as an ``ArraySet``."""
        y = self.labels()
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(y)):
            raise DatasetError(f"{self.path}: rows {int(idx.min())}..{int(idx.max())} asked, table has {len(y)}")
        order = np.argsort(idx, kind="stable")
        rows = idx[order]
        x_sorted = self._decode(self._column(self.image_column, rows), rows)
        x = np.empty_like(x_sorted)
        x[order] = x_sorted
        users = None if self._users is None else self._users[idx]
        return ArraySet(x, y[idx], self._classes, users, self._user_names or [])

    def read(self) -> ArraySet:
        return self.take(np.arange(len(self)))
