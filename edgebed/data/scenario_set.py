"""The scenario's data set in a format other than IDX (``dataset.format``) as a ``Dataset`` a model
trains on: train and test splits, images normalised per channel to float32 ``(N, C, H, W)``,
sequences as int64 token ids ``(N, T)``, with the data set's own sample shape and class count.

Splits: cifar10 / cifar100 have both in one place; other formats read ``path`` for training and
``test_path`` for testing, or hold out ``test_fraction`` of ``path`` (rows drawn by a fixed seed, not
the scenario's, so every seed of a study evaluates on the same rows; a file sorted by label, as an
ImageFolder is, still gives a test set of every class). Normalisation: ``dataset.normalise`` or, by
default, the training split's per-channel mean and std (``arrayset.channel_stats``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from . import Dataset, DatasetError, bounded
from .arrayset import ArraySet, normalise
from .formats import LoadSpec, labels as format_labels, load

_HOLDOUT_SEED = 0x7E57   # the held-out test rows: the same for every scenario seed
BOTH_SPLITS = ("cifar10", "cifar100")


def load_spec(spec, test: bool = False) -> LoadSpec:
    """The formats.LoadSpec of a scenario's ``dataset`` section (its training or its test split)."""
    path = spec.test_path if test and spec.test_path else spec.path
    split = "test" if test and spec.format in BOTH_SPLITS else "train"
    return LoadSpec(spec.format, path, split, dict(spec.options), spec.source)


def _holdout(n: int, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, test rows) of a split of ``n`` rows with ``fraction`` held out, both sorted."""
    k = int(round(n * fraction))
    perm = np.random.default_rng(_HOLDOUT_SEED).permutation(n)
    return np.sort(perm[k:]), np.sort(perm[:k])   # integer rows: no ties to break


def _own_test(spec) -> bool:
    return spec.format in BOTH_SPLITS or bool(spec.test_path)


def load_formatted(spec) -> Dataset:
    """The train and test splits of a scenario's non-IDX ``dataset`` section, prepared for a model."""
    train = load(load_spec(spec))
    tr = None
    if _own_test(spec):
        test = load(load_spec(spec, test=True))
    else:
        tr, te = _holdout(len(train), spec.test_fraction)
    stats = None
    if train.x.ndim == 4:
        stats = (spec.normalise.mean, spec.normalise.std) if spec.normalise else _accumulate(train.x, tr)
    if tr is not None:
        test, train = _rows(train, te), _rows(train, tr)
    if train.x.ndim == 4:
        tx, ex = normalise(train.x, *stats), normalise(test.x, *stats)
    elif train.is_sequence:
        tx, ex = np.asarray(train.x, np.int64), np.asarray(test.x, np.int64)
    else:
        tx, ex = np.asarray(train.x, np.float32), np.asarray(test.x, np.float32)
    classes = max(train.num_classes, test.num_classes)
    return Dataset(tx, train.y.astype(np.int64), ex, test.y.astype(np.int64), num_classes=classes,
                   users=train.users)


def _rows(ds: ArraySet, idx: np.ndarray) -> ArraySet:
    return ArraySet(ds.x[idx], ds.y[idx], ds.classes, None if ds.users is None else ds.users[idx],
                    ds.user_names, ds.vocab)


def formatted_labels(spec) -> tuple[np.ndarray, int, Optional[np.ndarray]]:
    """(training labels, classes, users or None) of a non-IDX ``dataset`` section, as
    ``load_formatted`` splits it, reading only labels where the format allows."""
    y, classes, users = format_labels(load_spec(spec))
    if not _own_test(spec):
        tr, _ = _holdout(len(y), spec.test_fraction)
        y, users = y[tr], None if users is None else users[tr]
    return np.asarray(y, np.int64), classes, users


def formatted_input(spec) -> tuple[tuple, int]:
    """(one sample's shape, number of classes) of a non-IDX ``dataset`` section."""
    from .formats import load_shard
    y, classes, _ = formatted_labels(spec)
    one = load_shard(load_spec(spec), [0]) if len(y) else None
    if one is None:
        raise DatasetError(f"dataset.path {spec.path}: the data set has no samples")
    return one.input_shape, classes


def formatted_shard(spec, rows) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of the training rows ``rows`` (indices into ``load_formatted``'s training split, as a
    partition gives them), prepared exactly as ``load_formatted`` prepares them — what an agent loads.
    npz and parquet / arrow read only these rows (``formats.load_shard``); their normalisation
    statistics, unless ``dataset.normalise`` gives them, are accumulated over the training rows in
    chunks (an uncompressed npz is memory-mapped for it; a Parquet file is read whole once)."""
    from .formats import load_shard
    ls = load_spec(spec)
    rows = np.asarray(rows, dtype=np.int64)
    train_rows = None
    if not _own_test(spec):
        train_rows, _ = _holdout(len(format_labels(ls)[0]), spec.test_fraction)
    part = load_shard(ls, rows if train_rows is None else train_rows[rows])
    y = part.y.astype(np.int64)
    if part.x.ndim == 4:
        stats = (spec.normalise.mean, spec.normalise.std) if spec.normalise else _train_stats(ls, train_rows)
        return normalise(part.x, *stats), y
    return (np.asarray(part.x, np.int64) if part.is_sequence else np.asarray(part.x, np.float32)), y


def _train_stats(ls: LoadSpec, train_rows: Optional[np.ndarray]) -> tuple[tuple, tuple]:
    """``_accumulate`` over the training rows of the loaded (for npz: memory-mapped) split."""
    return _accumulate(load(ls).x, train_rows)


def _accumulate(x: np.ndarray, train_rows: Optional[np.ndarray], chunk: int = 4096) -> tuple[tuple, tuple]:
    """Per-channel mean and std of images ``x[train_rows]`` (all rows when None) on the scale
    ``normalise`` subtracts them at ([0, 1] for bytes), accumulated in float64 ``chunk`` rows at a
    time — one function for the whole-set and the per-shard paths, so both normalise to the same bits."""
    idx = np.arange(len(x)) if train_rows is None else train_rows
    k = 255.0 if x.dtype == np.uint8 else 1.0
    s = s2 = 0.0
    n = 0
    for i in range(0, len(idx), chunk):
        b = np.asarray(x[idx[i:i + chunk]], dtype=np.float64) / k
        s = s + b.sum(axis=(0, 2, 3))
        s2 = s2 + (b * b).sum(axis=(0, 2, 3))
        n += b.shape[0] * b.shape[2] * b.shape[3]
    mean = np.asarray(s) / n
    std = np.sqrt(np.maximum(np.asarray(s2) / n - mean * mean, 0.0))
    return tuple(float(m) for m in mean), tuple(max(float(v), 1e-6) for v in std)


def formatted_missing(spec) -> list[str]:
    """What a non-IDX ``dataset`` section lacks on this host (empty: nothing): a missing file, or
    samples holding NaN / Inf (``nonfinite``)."""
    if spec.source != "path":
        return []
    out = []
    for key in ("path", "test_path"):
        p = getattr(spec, key)
        if p and not Path(p).expanduser().exists():
            from ..suggest import missing_path
            out.append(f"dataset.{key}: {p} does not exist {missing_path(p)}; give the {spec.format} data "
                       "set's file or directory (docs/data.md)")
    return out or nonfinite(spec)


FLOAT_FORMATS = ("npz", "parquet", "arrow", "leaf", "python")   # formats whose samples may be floats


def nonfinite(spec) -> list[str]:
    """Samples holding NaN or Inf in the train and test files of a ``dataset`` section, each naming its
    file and first row (empty: none) — checked at ``validate``, so a run never starts on them. npz is
    scanned in chunks of its memory map; Parquet / Arrow number lists and LEAF are checked as they are
    read; encoded images (uint8) can hold neither."""
    if spec.format not in FLOAT_FORMATS:
        return []
    out = []
    for test in ((False, True) if spec.test_path else (False,)):
        ls = load_spec(spec, test)
        where = ls.path if ls.path else f"dataset.factory {ls.options.get('factory')!r}"
        try:
            if ls.format in ("parquet", "arrow"):
                from .formats import _table
                t = _table(ls)
                import pyarrow as pa
                col = t.schema.field(t.image_column).type
                if not (pa.types.is_list(col) or pa.types.is_large_list(col) or pa.types.is_fixed_size_list(col)):
                    continue
                t.read()                  # number lists: decoding refuses NaN / Inf, naming the row
            else:
                bounded.require_finite(load(ls).x, where)
        except DatasetError as err:
            out.append(f"dataset.{'test_path' if test else 'path'}: {err}")
    return out
