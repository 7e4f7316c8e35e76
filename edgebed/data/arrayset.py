"""One loaded data set split as arrays (``ArraySet``), its per-device shard, and normalisation.

Every loader in ``edgebed.data`` returns an ``ArraySet``: images as float32 ``(N, C, H, W)`` in
[0, 1] (or uint8 where the format stores bytes and the caller normalises later), sequences as int64
``(N, T)`` token ids, labels as int64 ``(N,)``. ``users`` is the per-sample user / writer id where the
format has one (LEAF, a Parquet user column), for natural partitions. ``x`` may be a read-only
``np.memmap`` (npz stored uncompressed): ``shard`` then copies only the rows asked for. An agent
takes its shard with ``formats.load_shard``, which for npz and Parquet reads only its rows (memory
O(shard): benchmarks/results/data_shard.json).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from . import DatasetError


@dataclass
class ArraySet:
    """A split of a data set as arrays.

    ``x``: samples, ``(N, C, H, W)`` images or ``(N, T)`` int64 token sequences (may be a memmap).
    ``y``: int64 labels ``(N,)`` in ``0 .. num_classes - 1``. ``classes``: the class names, index =
    label. ``users``: optional per-sample user / writer id (``(N,)`` int64 index into ``user_names``).
    ``vocab``: for text, the characters of the vocabulary (token id = index)."""
    x: np.ndarray
    y: np.ndarray
    classes: list[str]
    users: Optional[np.ndarray] = None
    user_names: list[str] = field(default_factory=list)
    vocab: Optional[str] = None

    def __post_init__(self):
        if len(self.x) != len(self.y):
            raise DatasetError(f"{len(self.x)} samples but {len(self.y)} labels; a data set needs one "
                               "label per sample")
        if self.users is not None and len(self.users) != len(self.y):
            raise DatasetError(f"{len(self.users)} user ids for {len(self.y)} samples")
        if len(self.y) and (int(self.y.min()) < 0 or int(self.y.max()) >= len(self.classes)):
            raise DatasetError(f"labels span {int(self.y.min())}..{int(self.y.max())} but the data set "
                               f"names {len(self.classes)} classes (0..{len(self.classes) - 1})")

    def __len__(self) -> int:
        return len(self.y)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one sample: ``(C, H, W)`` for images, ``(T,)`` for sequences."""
        return tuple(int(s) for s in self.x.shape[1:])

    @property
    def is_sequence(self) -> bool:
        return self.x.ndim == 2 and np.issubdtype(self.x.dtype, np.integer)


def shard(ds: ArraySet, indices: Sequence[int] | np.ndarray) -> ArraySet:
    """The samples at ``indices`` (in that order) as a new in-memory ``ArraySet``: only these rows
    are read from a memmapped ``x``, so memory is O(len(indices))."""
    idx = np.asarray(indices, dtype=np.int64)
    if len(idx) and (idx.min() < 0 or idx.max() >= len(ds)):
        raise DatasetError(f"shard indices span {int(idx.min())}..{int(idx.max())} but the data set has "
                           f"{len(ds)} samples")
    # Fancy indexing a memmap reads only those rows; sorted order keeps the reads sequential.
    return ArraySet(np.ascontiguousarray(ds.x[idx]), np.asarray(ds.y[idx], dtype=np.int64), ds.classes,
                    None if ds.users is None else np.asarray(ds.users[idx]), ds.user_names, ds.vocab)


def channel_stats(x: np.ndarray, chunk: int = 4096) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and standard deviation of images ``(N, C, H, W)`` (any dtype, values as
    stored), accumulated in float64 over chunks of ``chunk`` samples so a memmap is not loaded whole."""
    if x.ndim != 4:
        raise DatasetError(f"channel statistics need images (N, C, H, W), got shape {tuple(x.shape)}")
    c = x.shape[1]
    s = np.zeros(c)
    s2 = np.zeros(c)
    n = 0
    for i in range(0, len(x), chunk):
        b = np.asarray(x[i:i + chunk], dtype=np.float64)
        s += b.sum(axis=(0, 2, 3))
        s2 += (b * b).sum(axis=(0, 2, 3))
        n += b.shape[0] * b.shape[2] * b.shape[3]
    if n == 0:
        raise DatasetError("channel statistics of an empty data set")
    mean = s / n
    std = np.sqrt(np.maximum(s2 / n - mean * mean, 0.0))
    return tuple(float(m) for m in mean), tuple(float(v) for v in std)


def normalise(x: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """Images ``(N, C, H, W)`` → float32 ``(x - mean[c]) / std[c]`` per channel. uint8 input is
    first scaled to [0, 1] (so mean / std are given on that scale, as torchvision's are)."""
    if x.ndim != 4:
        raise DatasetError(f"normalisation needs images (N, C, H, W), got shape {tuple(x.shape)}")
    c = x.shape[1]
    if len(mean) != c or len(std) != c:
        raise DatasetError(f"dataset.normalise: {len(mean)} means and {len(std)} stds for {c} channels; "
                           f"give one of each per channel")
    if any(s <= 0 for s in std):
        raise DatasetError(f"dataset.normalise: std {list(std)} must be positive")
    out = np.asarray(x, dtype=np.float32)
    if x.dtype == np.uint8:
        out = out / np.float32(255.0)
    m = np.asarray(mean, dtype=np.float32).reshape(1, c, 1, 1)
    s = np.asarray(std, dtype=np.float32).reshape(1, c, 1, 1)
    return ((out - m) / s).astype(np.float32, copy=False)


def hflip(x: np.ndarray) -> np.ndarray:
    """Images ``(N, C, H, W)`` mirrored left-right (a transform for augmentation)."""
    return np.ascontiguousarray(x[..., ::-1])


def random_crop(x: np.ndarray, padding: int, rng: np.random.Generator) -> np.ndarray:
    """Images ``(N, C, H, W)`` zero-padded by ``padding`` pixels and cropped back to (H, W) at an
    offset drawn per sample from ``rng`` (the CIFAR augmentation)."""
    n, c, h, w = x.shape
    p = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oy = rng.integers(0, 2 * padding + 1, n)
    ox = rng.integers(0, 2 * padding + 1, n)
    return np.stack([p[i, :, oy[i]:oy[i] + h, ox[i]:ox[i] + w] for i in range(n)]) if n else x.copy()
