"""Partitions as researchers name them: each device's training-sample indices, and a summary.

- ``iid``: a seeded random equal split (edgebed's original; the same indices as ``data.partition``).
- ``by-label``: each device gets ``labels_per_worker`` label-sorted shards (McMahan et al. 2017;
  edgebed's original, bit-identical to ``data.partition``).
- ``dirichlet``: per class, proportions drawn from Dirichlet(α·1) over devices (Hsu et al. 2019, the
  NIID-Bench scheme, with its balance rule: a device already holding N/n samples gets no more), redrawn
  until every device holds at least ``min_size`` samples. Smaller α, more skew.
- ``natural``: one user / writer per device (LEAF's setting); with fewer devices than users, each
  device takes a seeded share of whole users. A user's samples never span two devices.
- ``quantity``: label-blind (IID) samples, but device sizes skewed: proportional to log-normal(0, σ)
  draws (``sizes: lognormal``) or to a power law ``(rank)^-exponent`` over a seeded ranking
  (``sizes: powerlaw``), at least ``min_size`` each.

Determinism across hosts: every assignment is made with integers, except where a float draw becomes a
share — Dirichlet proportions and log-normal sizes come from numpy's ``Generator`` (whose samplers call
the C library's ``exp``/``log``). Each share is quantised to an integer of 2^24 units before any
cut is computed, so two hosts disagree only if their libm differ across a 2^-24 boundary of a share;
the cuts themselves are exact integer arithmetic. Power-law sizes use the same quantisation.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np

from . import DatasetError, partition as _original

SCHEMES = ("iid", "by-label", "dirichlet", "natural", "quantity")
_UNITS = 1 << 24     # quantisation of a float share before integer cuts (see module docstring)
_MAX_REDRAWS = 1000


@dataclass
class PartitionSummary:
    """What a partition gave each device, for the manifest and the report: ``samples[d]`` sample
    count, ``label_histogram[d][c]`` samples of class c, ``users[d]`` (natural only) users held."""
    scheme: str
    params: dict
    samples: list[int]
    label_histogram: list[list[int]]
    users: Optional[list[int]] = None
    redraws: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def summarise(shards: list[np.ndarray], labels: np.ndarray, num_classes: int, scheme: str, params: dict,
              users: Optional[np.ndarray] = None, redraws: int = 0) -> PartitionSummary:
    """Per-device counts and label histograms of ``shards`` (and users held, when ``users`` given)."""
    y = np.asarray(labels, dtype=np.int64)
    hist = [np.bincount(y[s], minlength=num_classes).tolist() for s in shards]
    held = None if users is None else [int(len(np.unique(users[s]))) for s in shards]
    return PartitionSummary(scheme, dict(params), [int(len(s)) for s in shards], hist, held, redraws)


def _shares_to_counts(shares: np.ndarray, total: int) -> np.ndarray:
    """Integer counts summing to ``total`` in proportion to float ``shares``: each share quantised to
    integer units first, then cut points ``floor(cumsum(units) * total / sum(units))`` exactly."""
    units = np.floor(np.asarray(shares, dtype=np.float64) / shares.sum() * _UNITS).astype(np.int64)
    if units.sum() == 0:
        units[:] = 1
    cum = np.cumsum(units)
    cuts = (cum * total) // cum[-1]            # int64: total ≤ 2^39 keeps cum * total exact
    return np.diff(np.concatenate([[0], cuts])).astype(np.int64)


def iid(labels: np.ndarray, n: int, seed: int) -> list[np.ndarray]:
    return _original(labels, n, "iid", seed)


def by_label(labels: np.ndarray, n: int, seed: int, labels_per_worker: int = 2) -> list[np.ndarray]:
    return _original(labels, n, "by-label", seed, labels_per_worker)


def dirichlet(labels: np.ndarray, n: int, seed: int, alpha: float, min_size: int = 1) -> tuple[list[np.ndarray], int]:
    """Dirichlet(α) label skew; returns the shards and how many times the draw was redone to give every
    device ``min_size`` samples."""
    if alpha <= 0:
        raise DatasetError(f"dataset.partition alpha={alpha} must be positive (0.1: strong skew, 100: near IID)")
    y = np.asarray(labels, dtype=np.int64)
    m = len(y)
    if n * min_size > m:
        raise DatasetError(f"dirichlet: {n} devices × min_size {min_size} > {m} samples; lower workers.n or "
                           "dataset.min_size")
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    for redraw in range(_MAX_REDRAWS):
        parts: list[list[np.ndarray]] = [[] for _ in range(n)]
        sizes = np.zeros(n, dtype=np.int64)
        for c in classes:
            idx = np.flatnonzero(y == c)
            rng.shuffle(idx)
            p = rng.dirichlet(np.full(n, float(alpha)))
            p = np.where(sizes * n < m, p, 0.0)     # the balance rule, in integers: size < m / n
            if p.sum() == 0:
                p = np.ones(n)
            counts = _shares_to_counts(p, len(idx))
            for d, piece in enumerate(np.split(idx, np.cumsum(counts)[:-1])):
                parts[d].append(piece)
            sizes += counts
        if sizes.min() >= min_size:
            return [np.sort(np.concatenate(p)) for p in parts], redraw
    raise DatasetError(f"dirichlet alpha={alpha}: after {_MAX_REDRAWS} draws some device still held fewer than "
                       f"{min_size} samples; raise alpha, lower dataset.min_size or workers.n")


def natural(users: Optional[np.ndarray], n: int, seed: int) -> list[np.ndarray]:
    """Whole users per device: with U users and n ≤ U devices, device d takes the users at positions
    d, d + n, ... of a seeded permutation of the user ids."""
    if users is None:
        raise DatasetError("dataset.partition natural needs a user / writer id per sample; this data set has "
                           "none (LEAF JSON has them; Parquet / Arrow give them with a user column, .npz with "
                           "a users array); use dirichlet or by-label for a label skew instead")
    u = np.asarray(users, dtype=np.int64)
    ids = np.unique(u)
    if n > len(ids):
        raise DatasetError(f"natural partition: workers.n={n} but the data set has only {len(ids)} users; a "
                           f"device holds whole users, so lower workers.n to at most {len(ids)}")
    order = np.argsort(u, kind="stable")
    starts = np.searchsorted(u[order], ids)
    by_user = np.split(order, starts[1:])
    perm = np.random.default_rng(seed).permutation(len(ids))
    return [np.sort(np.concatenate([by_user[j] for j in perm[d::n]])) for d in range(n)]


def quantity(m: int, n: int, seed: int, sizes: str = "lognormal", sigma: float = 1.0, exponent: float = 1.0,
             min_size: int = 1) -> list[np.ndarray]:
    """IID samples with skewed device sizes (see the module docstring)."""
    if n * min_size > m:
        raise DatasetError(f"quantity: {n} devices × min_size {min_size} > {m} samples; lower workers.n")
    rng = np.random.default_rng(seed)
    if sizes == "lognormal":
        if sigma < 0:
            raise DatasetError(f"dataset.sigma={sigma} must be ≥ 0")
        shares = rng.lognormal(0.0, sigma, n)
    elif sizes == "powerlaw":
        if exponent < 0:
            raise DatasetError(f"dataset.exponent={exponent} must be ≥ 0")
        shares = (rng.permutation(n) + 1.0) ** (-float(exponent))
    else:
        raise DatasetError(f"dataset.sizes {sizes!r}: use lognormal or powerlaw")
    counts = _shares_to_counts(shares, m - n * min_size) + min_size
    perm = rng.permutation(m)
    return [np.sort(s) for s in np.split(perm, np.cumsum(counts)[:-1])]


def make_partition(scheme: str, labels: np.ndarray, n: int, seed: int, num_classes: Optional[int] = None,
                   users: Optional[np.ndarray] = None, **params) -> tuple[list[np.ndarray], PartitionSummary]:
    """The shards of ``n`` devices under ``scheme`` and their summary. ``params``: ``labels_per_worker``
    (by-label), ``alpha``, ``min_size`` (dirichlet, quantity), ``sizes``, ``sigma``, ``exponent`` (quantity)."""
    y = np.asarray(labels, dtype=np.int64)
    k = int(num_classes if num_classes is not None else (int(y.max()) + 1 if len(y) else 0))
    redraws = 0
    if scheme == "iid":
        shards = iid(y, n, seed)
    elif scheme == "by-label":
        shards = by_label(y, n, seed, params.get("labels_per_worker", 2))
    elif scheme == "dirichlet":
        if "alpha" not in params:
            raise DatasetError("dataset.partition dirichlet needs dataset.alpha (e.g. 0.5)")
        shards, redraws = dirichlet(y, n, seed, params["alpha"], params.get("min_size", 1))
    elif scheme == "natural":
        shards = natural(users, n, seed)
    elif scheme == "quantity":
        shards = quantity(len(y), n, seed, params.get("sizes", "lognormal"), params.get("sigma", 1.0),
                          params.get("exponent", 1.0), params.get("min_size", 1))
    else:
        raise DatasetError(f"unknown partition {scheme!r}; use one of {', '.join(SCHEMES)}")
    used = {"by-label": ("labels_per_worker",), "dirichlet": ("alpha", "min_size"),
            "quantity": ("sizes", "min_size", "sigma" if params.get("sizes", "lognormal") == "lognormal" else "exponent")}
    kept = {key: params[key] for key in used.get(scheme, ()) if key in params}
    return shards, summarise(shards, y, k, scheme, kept, users, redraws)
