"""One entry point over every data-set format: ``load(spec) -> ArraySet``, ``labels(spec)`` and
``load_shard(spec, indices)`` (what an agent calls: only its own rows where the format allows).

``LoadSpec`` says which format, where, and the format's options. The registry ``LOADERS`` is a
plain dict, format name → function ``(spec) -> ArraySet``:

| format | ``path`` | lazy per-row reading |
|---|---|---|
| ``idx`` | an MNIST-layout directory (MNIST, Fashion-MNIST) | no (files are small) |
| ``cifar10`` / ``cifar100`` | ``cifar-*-py`` directory, its parent, or the tarball | no |
| ``imagefolder`` | a directory with one subdirectory per class | no |
| ``npz`` | an ``.npz`` | yes: an uncompressed ``x`` is read row by row (``npz.read_rows``) |
| ``parquet`` / ``arrow`` | a ``.parquet`` / ``.arrow`` file | yes: only the row groups holding the rows |
| ``leaf`` | a LEAF ``.json`` or a directory of them | no (JSON is parsed whole) |
| ``python`` | ``factory: "module:attr"`` (no path) | no |
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import DatasetError, load_dir
from .arrayset import ArraySet, shard
from .cifar import load_cifar
from .factory import load_factory
from .imagefolder import load_imagefolder
from .leaf import load_leaf
from .npz import load_npz, read_rows
from .tabular import TableReader


@dataclass
class LoadSpec:
    """Where a data set is and how to read it. ``split``: ``train`` or ``test`` (formats with both in
    one place: idx, cifar); other formats give one split per ``path``. ``options`` (by format):
    ``x_key``/``y_key``/``users_key`` (npz), ``image_column``/``label_column``/``user_column``/
    ``shape`` (parquet, arrow), ``label`` fine|coarse (cifar100), ``channels``/``size`` (imagefolder,
    parquet), ``vocab`` (leaf), ``factory``/``args`` (python), ``name``/``url``/``digests`` (download).
    ``source``: ``path`` (read ``path``) or ``download`` (``fetched``: cifar10, cifar100, idx)."""
    format: str
    path: Optional[str] = None
    split: str = "train"
    options: dict[str, Any] = field(default_factory=dict)
    source: str = "path"

    def where(self) -> Path:
        if self.source == "download":
            return fetched(self)
        if not self.path:
            raise DatasetError(f"dataset.format {self.format}: needs dataset.path")
        return Path(self.path).expanduser()


def fetched(spec: LoadSpec) -> Path:
    """``source: download``: the standard files of ``spec``'s data set, fetched into ``spec.path``
    (default ``~/.cache/edgebed/<name>``) and verified (``download.py``); ``options.url`` replaces the
    standard host. cifar10 / cifar100 give their tarball; ``idx`` with ``options.name`` ``mnist`` or
    ``fashion-mnist`` the directory of its four files."""
    from . import download_mnist
    from .download import download
    name = spec.options.get("name", "fashion-mnist") if spec.format == "idx" else spec.format
    cache = Path(spec.path or Path.home() / ".cache" / "edgebed" / name).expanduser()
    url = spec.options.get("url")
    if name == "mnist":
        return download_mnist(cache, **({"base_url": url} if url else {}))
    out = download(name, cache, base_url=url, digests=spec.options.get("digests"))
    return out / f"{'cifar-10' if name == 'cifar10' else 'cifar-100'}-python.tar.gz" if name.startswith("cifar") else out


def _idx(spec: LoadSpec) -> ArraySet:
    ds = load_dir(spec.where())
    x, y = (ds.train_x, ds.train_y) if spec.split == "train" else (ds.test_x, ds.test_y)
    y = y.astype(np.int64)
    return ArraySet(x[:, None, :, :], y, [str(i) for i in range(max(10, int(y.max()) + 1 if len(y) else 0))])


def _table(spec: LoadSpec) -> TableReader:
    o = spec.options
    return TableReader(spec.where(), o.get("image_column", "image"), o.get("label_column", "label"),
                       o.get("user_column"), o.get("shape"), o.get("channels"), _size(o))


def _size(o: dict) -> Optional[tuple[int, int]]:
    s = o.get("size")
    return None if s is None else (int(s[0]), int(s[1]))


LOADERS: dict[str, Callable[[LoadSpec], ArraySet]] = {
    "idx": _idx,
    "cifar10": lambda s: load_cifar(s.where(), "cifar10", s.split),
    "cifar100": lambda s: load_cifar(s.where(), "cifar100", s.split, s.options.get("label", "fine")),
    "imagefolder": lambda s: load_imagefolder(s.where(), s.options.get("channels"), _size(s.options),
                                              bool(s.options.get("follow_symlinks", False))),
    "npz": lambda s: load_npz(s.where(), s.options.get("x_key", "x"), s.options.get("y_key", "y"),
                              s.options.get("users_key"), s.options.get("classes")),
    "parquet": lambda s: _table(s).read(),
    "arrow": lambda s: _table(s).read(),
    "leaf": lambda s: load_leaf(s.where(), s.options.get("vocab")),
    "python": lambda s: load_factory(_factory(s), s.options.get("args")),
}


def _factory(spec: LoadSpec) -> str:
    f = spec.options.get("factory")
    if not f:
        raise DatasetError("dataset.format python needs dataset.factory: 'package.module:function'")
    return f


def _check(spec: LoadSpec) -> None:
    if spec.format not in LOADERS:
        raise DatasetError(f"unknown dataset.format {spec.format!r}; use one of {', '.join(sorted(LOADERS))}")
    if spec.split not in ("train", "test"):
        raise DatasetError(f"dataset split {spec.split!r}: use train or test")


def load(spec: LoadSpec) -> ArraySet:
    """The whole split (``x`` memory-mapped for an uncompressed ``.npz``)."""
    _check(spec)
    return LOADERS[spec.format](spec)


def labels(spec: LoadSpec) -> tuple[np.ndarray, int, Optional[np.ndarray]]:
    """``(labels, number of classes, users or None)`` — what a partition needs; Parquet / Arrow read
    only those columns, an ``.npz`` maps its samples without reading them."""
    _check(spec)
    if spec.format in ("parquet", "arrow"):
        t = _table(spec)
        y = t.labels()
        return y, len(t._classes), t._users
    ds = load(spec)
    return ds.y, ds.num_classes, ds.users


def load_shard(spec: LoadSpec, indices: Sequence[int] | np.ndarray) -> ArraySet:
    """The rows ``indices`` of the split: for npz and parquet / arrow, reading only those rows."""
    _check(spec)
    if spec.format in ("parquet", "arrow"):
        return _table(spec).take(indices)
    if spec.format == "npz":       # labels from the archive, samples row by row (no file mapping)
        ds = load(spec)
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(ds)):
            raise DatasetError(f"{spec.path}: rows {int(idx.min())}..{int(idx.max())} asked, it has {len(ds)}")
        x = read_rows(spec.where(), spec.options.get("x_key", "x"), idx)
        return ArraySet(x, ds.y[idx], ds.classes, None if ds.users is None else ds.users[idx], ds.user_names)
    return shard(load(spec), indices)
