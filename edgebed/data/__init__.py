"""Datasets: IDX loading, the bundled 10,000 MNIST digits, verified download, and partitioning.

Sources (``dataset.source`` in a scenario):
- ``bundled``: the 10,000 real MNIST digits shipped in this package (a ``test_fraction`` is held out).
- ``path``: any directory in the standard MNIST layout (``train-images-idx3-ubyte[.gz]``,
  ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``), e.g. full
  MNIST or Debian's Fashion-MNIST in /usr/share/datasets/fashion-mnist.
- ``download``: fetch the four standard MNIST files, check their sha256, cache them.

Other formats (CIFAR, ImageFolder, npz, Parquet / Arrow, LEAF, Python factories) are read by
``formats.load`` / ``formats.load_shard`` into an ``arrayset.ArraySet``; partitions beyond iid and
by-label (dirichlet, natural, quantity) are in ``partitions`` (docs/data.md).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import shutil
import struct
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..atomic import replacing

BUNDLED_DIR = Path(__file__).parent / "mnist10k"
BUNDLED_FILES = ("mnist10k-images-idx3-ubyte.gz", "mnist10k-labels-idx1-ubyte.gz")
STANDARD_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                  "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
# sha256 of the gzipped standard MNIST files as published (the files every mirror serves).
MNIST_SHA256 = {
    "train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
}
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
MEAN, STD = 0.1307, 0.3081


class DatasetError(ValueError):
    pass


@dataclass
class Dataset:
    """A scenario's train and test splits. IDX: uint8 ``[N, 28, 28]`` images (``normalize`` makes them
    model inputs); other formats (``scenario_set.py``): already model inputs — float32 ``(N, C, H, W)``
    or int64 token ids ``(N, T)``. ``num_classes``: labels are 0..num_classes-1."""
    train_x: np.ndarray
    train_y: np.ndarray  # uint8 (IDX) or int64 [N]
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int = 10
    users: Optional[np.ndarray] = None   # training samples' user ids, where the format has them

    @property
    def input_shape(self) -> tuple:
        """One model input's shape: (1, 28, 28) for IDX, the format's own otherwise."""
        return tuple(normalize(self.train_x[:1]).shape[1:])

    def cut(self, train: slice, test: Optional[slice] = None, into_test: bool = False) -> "Dataset":
        """The training rows ``train`` (and ``test`` rows of the test split), or with ``into_test`` the
        training rows ``train`` as the new test split (validation)."""
        tx, ty, u = self.train_x[train], self.train_y[train], None if self.users is None else self.users[train]
        if into_test:
            return Dataset(self.train_x[test], self.train_y[test], tx, ty, self.num_classes,
                           None if self.users is None else self.users[test])
        return Dataset(tx, ty, self.test_x, self.test_y, self.num_classes, u)


def load_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (optionally gzipped) into a numpy array of its declared shape."""
    from .bounded import read_bytes
    path = Path(path)
    try:
        raw = read_bytes(path)      # under the byte limit: the file's size, then what gunzip gives
    except (OSError, EOFError, zlib.error) as err:
        raise DatasetError(f"{path}: can't read IDX file: {err}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DatasetError(f"{path}: not an IDX file (bad magic)")
    dtype = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}.get(raw[2])
    if dtype is None:
        raise DatasetError(f"{path}: unknown IDX element type 0x{raw[2]:02x}")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise DatasetError(f"{path}: IDX header declares {ndim} dimensions but the file ends first (truncated?)")
    dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=dtype, offset=4 + 4 * ndim)
    if data.size != math.prod(dims):
        raise DatasetError(f"{path}: header says {dims} but holds {data.size} elements (truncated?)")
    return data.reshape(dims)


def _find(directory: Path, stem: str) -> Path:
    for cand in (directory / stem, directory / f"{stem}.gz"):
        if cand.exists():
            return cand
    raise DatasetError(f"{directory}: missing {stem}[.gz]; an MNIST-format directory holds "
                       f"{', '.join(STANDARD_FILES)}")


def missing(spec) -> list[str]:
    """What a scenario's ``dataset`` section needs on this host but lacks (empty: nothing missing),
    checked before a run starts instead of in every agent. ``download`` fetches what it lacks."""
    if getattr(spec, "format", "idx") != "idx":
        from .scenario_set import formatted_missing
        return formatted_missing(spec)
    if spec.source != "path":
        return []
    d = Path(spec.path)
    if not d.is_dir():
        from ..suggest import missing_path
        where = f" {missing_path(d)}" if not d.exists() else ""
        return [f"dataset.path: {d} is not a directory{where}; give a directory with the four MNIST-format "
                f"IDX files ({', '.join(STANDARD_FILES)})"]
    lacking = [s for s in STANDARD_FILES if not (d / s).exists() and not (d / f"{s}.gz").exists()]
    if lacking:
        return [f"dataset.path: {d} lacks {', '.join(f'{s}[.gz]' for s in lacking)}"]
    return damaged(d)


def damaged(directory: Path) -> list[str]:
    """What is wrong with the four IDX files of an MNIST-format directory (empty: they read as 28×28
    images with labels 0..9, as many labels as images) — so a corrupt file is refused before a run
    starts, not met by every agent and the evaluator mid-run."""
    fix = ("replace it with the MNIST-format IDX file of that name (or point dataset.path elsewhere, or "
           "use dataset.source: download)")
    try:
        ds = load_dir(directory)
    except DatasetError as err:
        return [f"dataset.path: {err}; {fix}"]
    problems = []
    for split, x, y in (("train", ds.train_x, ds.train_y), ("t10k", ds.test_x, ds.test_y)):
        if x.ndim != 3 or x.shape[1:] != (28, 28):
            problems.append(f"dataset.path: {directory}: {split} images have shape {tuple(x.shape)}, not "
                            f"(N, 28, 28); {fix}")
        if y.ndim != 1 or len(y) != len(x):
            problems.append(f"dataset.path: {directory}: {len(y)} {split} labels for {len(x)} images; {fix}")
        elif len(y) and (int(y.min()) < 0 or int(y.max()) > 9):
            problems.append(f"dataset.path: {directory}: {split} labels outside 0..9 "
                            f"({int(y.min())}..{int(y.max())}); {fix}")
    return problems


def load_dir(directory: str | Path) -> Dataset:
    d = Path(directory)
    if not d.is_dir():
        raise DatasetError(f"{d}: no such dataset directory")
    arrs = [load_idx(_find(d, s)) for s in STANDARD_FILES]
    return Dataset(*arrs)


def load_bundled(test_fraction: float, seed: int = 0) -> Dataset:
    x = load_idx(BUNDLED_DIR / BUNDLED_FILES[0])
    y = load_idx(BUNDLED_DIR / BUNDLED_FILES[1])
    # The bundled digits are already shuffled with a fixed seed; hold out the tail for testing.
    n_test = int(round(len(y) * test_fraction))
    cut = len(y) - n_test
    return Dataset(x[:cut], y[:cut], x[cut:], y[cut:])


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_mnist(dest: str | Path, base_url: str = MNIST_URL,
                   checksums: Optional[dict[str, str]] = None, timeout: float = 60.0) -> Path:
    """Fetch the four gzipped MNIST files into ``dest`` and verify each sha256.

    Files already present with the right checksum are kept. A mismatch deletes the download and
    raises DatasetError, so a corrupt file is never used."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    checksums = checksums or MNIST_SHA256
    for name, want in checksums.items():
        target = dest / name
        if target.exists() and sha256_of(target) == want:
            continue
        with replacing(target) as tmp:    # renamed only when the download is complete and verified
            try:
                with urllib.request.urlopen(base_url.rstrip("/") + "/" + name, timeout=timeout) as r, \
                        open(tmp, "wb") as f:
                    shutil.copyfileobj(r, f)
            except OSError as err:
                raise DatasetError(f"download of {name} from {base_url} failed: {err}; "
                                   f"use dataset.source: bundled or path") from None
            got = sha256_of(tmp)
            if got != want:
                raise DatasetError(f"{name}: sha256 {got} does not match the expected {want}; "
                                   f"the mirror served a different file, nothing was kept")
    return dest


def load_dataset(spec, seed: int = 0) -> Dataset:
    """The dataset a scenario's ``dataset`` section names, with ``train_samples`` applied."""
    if getattr(spec, "format", "idx") != "idx":
        from .scenario_set import load_formatted
        ds = load_formatted(spec)
    elif spec.source == "bundled":
        ds = load_bundled(spec.test_fraction, seed)
    elif spec.source == "path":
        ds = load_dir(spec.path)
    else:
        cache = Path(spec.path or Path.home() / ".cache" / "edgebed" / "mnist")
        ds = load_dir(download_mnist(cache))
    v = getattr(spec, "validation_samples", None)
    if v is not None:
        ds = validation_split(ds, v)
    if spec.train_samples is not None:
        if spec.train_samples > len(ds.train_y):
            raise DatasetError(f"dataset.train_samples={spec.train_samples} but the training split has "
                               f"only {len(ds.train_y)} samples")
        ds = ds.cut(slice(0, spec.train_samples))
    return ds


def validation_split(ds: Dataset, n: int) -> Dataset:
    """The last ``n`` training samples become the evaluation set (the test set is dropped), the rest
    stay for training: tuning then never sees the test set."""
    if not 0 < n < len(ds.train_y):
        raise DatasetError(f"dataset.validation_samples={n} must be between 1 and the training split's "
                           f"{len(ds.train_y) - 1} (it has {len(ds.train_y)} samples)")
    cut = len(ds.train_y) - n
    return ds.cut(slice(cut, None), slice(0, cut), into_test=True)


def partition(labels: np.ndarray, n: int, scheme: str, seed: int, labels_per_worker: int = 2) -> list[np.ndarray]:
    """Indices of each worker's shard. ``iid``: a random equal split. ``by-label``: each worker gets
    samples of ``labels_per_worker`` classes only (sorted-by-label shards, as in McMahan et al.)."""
    rng = np.random.default_rng(seed)
    m = len(labels)
    if n > m:
        raise DatasetError(f"{n} workers but only {m} training samples; lower workers.n, add data, or "
                           "give each device its own sample (dataset.samples_per_device)")
    if scheme == "iid":
        return [np.sort(s) for s in np.array_split(rng.permutation(m), n)]
    if scheme == "by-label":
        order = np.argsort(labels, kind="stable")
        shards = np.array_split(order, n * labels_per_worker)
        pick = rng.permutation(len(shards))
        return [np.sort(np.concatenate([shards[j] for j in pick[w::n]])) for w in range(n)]
    raise DatasetError(f"unknown partition {scheme!r}; use iid, by-label, {', '.join(EXTRA_SCHEMES)}")


# Partitions beyond the original two (edgebed/data/partitions.py) and the dataset keys they read.
EXTRA_SCHEMES = ("dirichlet", "natural", "quantity")
PARTITION_KEYS = ("alpha", "min_size", "sizes", "sigma", "exponent")

_SAMPLE_STREAM = 0x5A3D   # a device's own sample: rng [seed, device, this]


class Partition:
    """The training samples of each device, by device number (``shards[d]``: sorted indices).

    Disjoint shards by default (the paper's setting, ``partition``: all n computed at once). With
    ``samples_per_device`` k, each device draws its own k samples without replacement from its own
    stream (seed, device), independently of the others — samples overlap across devices, as in FL
    simulators, so n may exceed the data set; ``by-label`` first draws the device's
    ``labels_per_worker`` classes, then k samples among them. Computed on demand, so a device's sample
    costs memory only once it is asked for."""

    def __init__(self, labels: np.ndarray, n: int, scheme: str, seed: int, labels_per_worker: int = 2,
                 samples_per_device: Optional[int] = None, params: Optional[dict] = None):
        self.labels, self.n, self.scheme, self.seed = labels, n, scheme, seed
        self.labels_per_worker, self.k = labels_per_worker, samples_per_device
        if scheme in EXTRA_SCHEMES:   # dirichlet, natural, quantity: edgebed/data/partitions.py
            if samples_per_device:
                raise DatasetError(f"dataset.samples_per_device works with iid and by-label, not {scheme}")
            from .partitions import make_partition
            self._shards, self.summary = make_partition(scheme, labels, n, seed, **(params or {}))
            return
        self._shards = None if samples_per_device else partition(labels, n, scheme, seed, labels_per_worker)
        if samples_per_device:
            problem = sample_problem(labels, scheme, samples_per_device, labels_per_worker)
            if problem:
                raise DatasetError(problem)
            self._by_class = {int(c): np.flatnonzero(labels == c) for c in np.unique(labels)}

    @classmethod
    def for_spec(cls, labels: np.ndarray, n: int, spec, seed: int, users: Optional[np.ndarray] = None) -> "Partition":
        """The partition a scenario's ``dataset`` section names (the section, or its dict on the wire)."""
        get = spec.get if isinstance(spec, dict) else (lambda k, d=None: getattr(spec, k, d))
        params = {k: get(k) for k in PARTITION_KEYS if get(k) is not None}
        if users is not None:
            params["users"] = users
        return cls(labels, n, get("partition"), seed, get("labels_per_worker", 2), get("samples_per_device"),
                   params)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, device: int) -> np.ndarray:
        if not 0 <= device < self.n:
            raise IndexError(f"device {device} is not in 0..{self.n - 1}")
        if self._shards is not None:
            return self._shards[device]
        rng = np.random.default_rng([self.seed, device, _SAMPLE_STREAM])
        if self.scheme == "iid":
            return np.sort(rng.choice(len(self.labels), size=self.k, replace=False))
        classes = rng.choice(sorted(self._by_class), size=self.labels_per_worker, replace=False)
        pool = np.concatenate([self._by_class[int(c)] for c in sorted(classes)])
        return np.sort(rng.choice(pool, size=self.k, replace=False))

    def __iter__(self):
        return (self[d] for d in range(self.n))


def sample_problem(labels: np.ndarray, scheme: str, k: int, labels_per_worker: int) -> Optional[str]:
    """Why every device can't draw its own ``k`` samples (None: it can)."""
    m = len(labels)
    if scheme == "iid":
        if k > m:
            return (f"dataset.samples_per_device={k} but the training split has only {m} samples; lower "
                    "samples_per_device or use more data")
        return None
    if scheme not in ("by-label",):
        return f"unknown partition {scheme!r}; use iid or by-label"
    sizes = sorted(np.bincount(labels.astype(np.int64)).tolist())
    sizes = [s for s in sizes if s]
    if labels_per_worker > len(sizes):
        return (f"dataset.labels_per_worker={labels_per_worker} but the training split has only {len(sizes)} "
                "classes; lower labels_per_worker")
    smallest = sum(sizes[:labels_per_worker])
    if k > smallest:
        return (f"dataset.samples_per_device={k} with by-label: a device's {labels_per_worker} classes may hold "
                f"only {smallest} samples; lower samples_per_device to at most {smallest} or raise "
                "labels_per_worker")
    return None


def partition_problems(spec, n: int, seed: int = 0) -> list[str]:
    """What keeps ``n`` devices from getting their samples under a scenario's ``dataset`` section
    (empty: nothing), read from the label file alone, before anything starts. A ``download`` source
    not yet cached can't be checked here (the run checks it)."""
    try:
        got = labels_and_users(spec)
    except DatasetError as err:
        return [str(err)]
    if got is None:
        return []
    labels, users = got
    if spec.partition in EXTRA_SCHEMES:
        try:
            Partition.for_spec(labels, n, spec, seed, users)
        except DatasetError as err:
            return [str(err)]
        return []
    if getattr(spec, "samples_per_device", None):
        problem = sample_problem(labels, spec.partition, spec.samples_per_device, spec.labels_per_worker)
        return [problem] if problem else []
    if n > len(labels):
        return [f"workers.n={n} but the training split has only {len(labels)} samples, and the default "
                "partitions are disjoint (every device needs at least one); set dataset.samples_per_device "
                "(e.g. 300: each device draws its own sample, overlapping), lower workers.n, or use more data"]
    if spec.partition == "by-label" and n * spec.labels_per_worker > len(labels):
        return [f"workers.n={n} × labels_per_worker={spec.labels_per_worker} shards but only {len(labels)} "
                "training samples; lower workers.n or labels_per_worker, or set dataset.samples_per_device"]
    return []


SUMMARY_MAX_DEVICES = 1000   # a manifest records per-device histograms up to this many devices


def partition_summary(spec, n: int, seed: int) -> Optional[dict]:
    """Each device's sample count and label histogram under a scenario's ``dataset`` section (the
    manifest's ``partition``); None when it can't be known before the run (a download not yet cached,
    devices drawing their own samples) or n > ``SUMMARY_MAX_DEVICES``."""
    from .partitions import summarise
    if n > SUMMARY_MAX_DEVICES or getattr(spec, "samples_per_device", None):
        return None
    got = labels_and_users(spec)
    if got is None:
        return None
    y = got[0].astype(np.int64)
    p = Partition.for_spec(y, n, spec, seed, got[1])
    if hasattr(p, "summary"):
        return p.summary.to_dict()
    params = {"labels_per_worker": spec.labels_per_worker} if spec.partition == "by-label" else {}
    return summarise(list(p), y, max(10, int(y.max()) + 1) if getattr(spec, "format", "idx") == "idx"
                     else input_of(spec)[1], spec.partition, params).to_dict()


def load_labels(spec) -> Optional[np.ndarray]:
    """The training labels a scenario's ``dataset`` section gives (``train_samples`` and
    ``validation_samples`` applied), reading no images; None for a ``download`` not yet cached."""
    got = labels_and_users(spec)
    return None if got is None else got[0]


def labels_and_users(spec) -> Optional[tuple[np.ndarray, Optional[np.ndarray]]]:
    """``load_labels`` and the samples' user ids (None where the format has none) alike."""
    users = None
    if getattr(spec, "format", "idx") != "idx":
        if spec.source == "download":
            from .scenario_set import load_spec
            if not fetched_cached(load_spec(spec)):
                return None
        from .scenario_set import formatted_labels
        y, _, users = formatted_labels(spec)
    elif spec.source == "bundled":
        y = load_idx(BUNDLED_DIR / BUNDLED_FILES[1])
        y = y[: len(y) - int(round(len(y) * spec.test_fraction))]
    else:
        d = Path(spec.path) if spec.source == "path" else Path(spec.path or Path.home() / ".cache" / "edgebed" / "mnist")
        if spec.source == "download" and not any((d / f).exists() for f in ("train-labels-idx1-ubyte",
                                                                             "train-labels-idx1-ubyte.gz")):
            return None
        y = load_idx(_find(d, STANDARD_FILES[1]))
    v = getattr(spec, "validation_samples", None)
    if v is not None:
        if not 0 < v < len(y):
            raise DatasetError(f"dataset.validation_samples={v} must be between 1 and the training split's "
                               f"{len(y) - 1} (it has {len(y)} samples)")
        y = y[: len(y) - v]
        users = None if users is None else users[: len(users) - v]
    if spec.train_samples is not None:
        if spec.train_samples > len(y):
            raise DatasetError(f"dataset.train_samples={spec.train_samples} but the training split has "
                               f"only {len(y)} samples")
        y = y[: spec.train_samples]
        users = None if users is None else users[: spec.train_samples]
    return y, users


def normalize(x: np.ndarray) -> np.ndarray:
    """Samples as the model takes them: IDX's uint8 [N, 28, 28] → float32 [N, 1, 28, 28], standardised
    with MNIST's mean and std; the other formats' samples are prepared when loaded (float32 images
    normalised per channel, int64 token ids) and pass through unchanged."""
    if x.dtype != np.uint8 or x.ndim != 3:
        return np.asarray(x)
    return ((x.astype(np.float32) / 255.0 - MEAN) / STD)[:, None, :, :]


def input_of(spec) -> Optional[tuple[tuple, int]]:
    """(one model input's shape, number of classes) of a scenario's ``dataset`` section, read from
    the data set (IDX: 1×28×28 in 10 classes, the format's fixed layout); None for a download not
    yet cached (nothing is fetched to learn it)."""
    if getattr(spec, "format", "idx") == "idx":
        return (1, 28, 28), 10
    if spec.source == "download":
        from .scenario_set import load_spec
        if not fetched_cached(load_spec(spec)):
            return None
    return _formatted_input(json.dumps(spec.model_dump(mode="json"), sort_keys=True))


@functools.lru_cache(maxsize=8)
def _formatted_input(spec_json: str) -> tuple[tuple, int]:
    """``input_of`` a non-IDX section, once per process (a LEAF set is parsed whole to learn it)."""
    from types import SimpleNamespace
    from .scenario_set import formatted_input
    return formatted_input(SimpleNamespace(**json.loads(spec_json)))


def fetched_cached(spec) -> bool:
    """Whether a ``source: download`` data set is already in its cache (cifar: the tarball)."""
    name = spec.format
    cache = Path(spec.path or Path.home() / ".cache" / "edgebed" / name).expanduser()
    return any(cache.glob("*.tar.gz")) or any(p.is_dir() for p in cache.glob("cifar-*"))
