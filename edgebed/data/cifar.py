"""The CIFAR-10 / CIFAR-100 python pickles (Krizhevsky's ``cifar-10-python.tar.gz`` layout).

CIFAR-10: ``cifar-10-batches-py/`` holds ``data_batch_1`` .. ``data_batch_5`` (train), ``test_batch``
and ``batches.meta``; each batch a dict ``{b"data": uint8 (N, 3072), b"labels": [int], ...}``.
CIFAR-100: ``cifar-100-python/`` holds ``train``, ``test`` and ``meta`` with ``b"fine_labels"`` /
``b"coarse_labels"`` and ``b"fine_label_names"`` / ``b"coarse_label_names"``. ``path`` may be that
directory, its parent, or the ``.tar.gz`` itself (read in place, never extracted). The pickles are
read through ``safe_pickle``: a file that names any other object is refused; a tarball's member is
refused by its declared size before it is read (``bounded.tar_member``). Images come back as
uint8 ``(N, 3, 32, 32)`` (normalise with ``arrayset.normalise``).
"""
from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Callable

import numpy as np

from . import DatasetError, bounded, safe_pickle
from .arrayset import ArraySet

# Standard URLs and the md5 torchvision publishes for them (torchvision.datasets.CIFAR10 / CIFAR100).
URLS = {"cifar10": ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                    "md5", "c58f30108f718f92721af3b95e74349a"),
        "cifar100": ("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                     "md5", "eb9058c3a382ffc7106e4002c42a8d85")}
_LAYOUT = {
    "cifar10": {"dir": "cifar-10-batches-py", "meta": "batches.meta",
                "train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
    "cifar100": {"dir": "cifar-100-python", "meta": "meta", "train": ["train"], "test": ["test"]},
}


def _reader(path: Path, variant: str) -> Callable[[str], object]:
    """A function member name → unpickled object, over a directory or a tarball."""
    sub = _LAYOUT[variant]["dir"]
    if path.is_dir():
        base = path / sub if (path / sub).is_dir() else path

        def read_dir(name: str) -> object:
            f = base / name
            if not f.is_file():
                raise DatasetError(f"{base}: missing {name}; a {variant} directory holds "
                                   f"{', '.join(_LAYOUT[variant]['train'] + _LAYOUT[variant]['test'])} and "
                                   f"{_LAYOUT[variant]['meta']} (from {URLS[variant][0].rsplit('/', 1)[1]})")
            return safe_pickle.load(f)
        return read_dir
    if path.is_file() and tarfile.is_tarfile(path):
        def read_tar(name: str) -> object:
            raw = bounded.tar_member(path, f"{sub}/{name}", f"{path}: the tarball has no {sub}/{name}; is it "
                                     f"the {variant} python version?")
            return safe_pickle.load(raw, where=f"{path}:{sub}/{name}")
        return read_tar
    raise DatasetError(f"{path}: neither a {variant} directory nor its .tar.gz; give dataset.path as the "
                       f"extracted {sub}/ directory or the downloaded tarball")


def _field(d: object, key: bytes, where: str):
    if not isinstance(d, dict) or key not in d:
        have = sorted(k.decode(errors="replace") if isinstance(k, bytes) else str(k)
                      for k in (d.keys() if isinstance(d, dict) else []))
        raise DatasetError(f"{where}: no {key.decode()!r} entry (has {have}); not a CIFAR python pickle")
    return d[key]


def load_cifar(path: str | Path, variant: str = "cifar10", split: str = "train",
               label: str = "fine") -> ArraySet:
    """One split (``train`` or ``test``) of CIFAR-10 or CIFAR-100 (``label``: ``fine`` 100 classes or
    ``coarse`` 20 superclasses; CIFAR-100 only)."""
    if variant not in _LAYOUT:
        raise DatasetError(f"unknown CIFAR variant {variant!r}; use cifar10 or cifar100")
    if split not in ("train", "test"):
        raise DatasetError(f"dataset split {split!r}: use train or test")
    path = Path(path)
    read = _reader(path, variant)
    meta = read(_LAYOUT[variant]["meta"])
    if variant == "cifar10":
        names_key, labels_key = b"label_names", b"labels"
    elif label in ("fine", "coarse"):
        names_key, labels_key = f"{label}_label_names".encode(), f"{label}_labels".encode()
    else:
        raise DatasetError(f"CIFAR-100 label {label!r}: use fine or coarse")
    names = _field(meta, names_key, f"{path} meta")
    if not isinstance(names, (list, tuple)):
        raise DatasetError(f"{path} meta: {names_key.decode()!r} is a {type(names).__name__}, not a list of "
                           "class names; not a CIFAR python pickle")
    classes = [n.decode(errors="replace") if isinstance(n, bytes) else str(n) for n in names]
    xs, ys = [], []
    for name in _LAYOUT[variant][split]:
        batch = read(name)
        where = f"{path}: {name}"
        try:
            x = np.asarray(_field(batch, b"data", where))
            y = np.asarray(_field(batch, labels_key, where), dtype=np.int64)
        except (TypeError, ValueError, OverflowError) as err:
            if isinstance(err, DatasetError):
                raise
            raise DatasetError(f"{where}: data or labels are not arrays of numbers ({err}); not a CIFAR "
                               "python pickle") from None
        if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072:
            raise DatasetError(f"{where}: data is {x.dtype} {tuple(x.shape)}, not uint8 (N, 3072) "
                               "(32×32×3 bytes per image); not a CIFAR python pickle")
        if len(y) != len(x):
            raise DatasetError(f"{where}: {len(y)} labels for {len(x)} images; the file is damaged, re-download it")
        xs.append(x.reshape(-1, 3, 32, 32))
        ys.append(y)
    return ArraySet(np.concatenate(xs), np.concatenate(ys), classes)
