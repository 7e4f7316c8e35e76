"""LEAF's JSON (Caldas et al. 2018): ``{"users": [...], "num_samples": [...], "user_data": {user:
{"x": [...], "y": [...]}}}``, one or several files, with each sample's user kept for natural partitions.

Two sample kinds, told apart by ``x``: FEMNIST, 784 floats per sample (a 28×28 greyscale image,
returned as float32 ``(N, 1, 28, 28)``, 62 classes: digits, upper-case, lower-case letters); and
Shakespeare, a string of 80 characters whose label is the next character (returned as int64 token
ids ``(N, 80)`` over ``vocab``, label = the next character's id). The default vocabulary is LEAF's own
80 characters (``ALL_LETTERS`` in its Shakespeare model). JSON is parsed whole, so a LEAF set is
read completely by whoever loads it (its shards are then taken with ``arrayset.shard``).
"""
from __future__ import annotations

import string
from pathlib import Path
from typing import Optional

import numpy as np

from . import DatasetError, bounded
from .arrayset import ArraySet

SHAKESPEARE_VOCAB = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
FEMNIST_CLASSES = list(string.digits + string.ascii_uppercase + string.ascii_lowercase)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise DatasetError(f"{path}: no .json files; LEAF writes its data as <name>.json under "
                               "data/<set>/data/train and .../test")
        return files
    if path.is_file():
        return [path]
    raise DatasetError(f"{path}: no such file or directory")


def _read(f: Path) -> dict:
    """One LEAF file, parsed under the bounded reader's limits, its top-level types checked."""
    try:
        doc = bounded.loads_json(f)
    except OSError as err:
        raise DatasetError(f"{f}: not readable ({err})") from None
    if not isinstance(doc, dict) or not {"users", "user_data"} <= doc.keys():
        raise DatasetError(f"{f}: not LEAF JSON: needs keys 'users' and 'user_data' "
                           f"(has {sorted(doc) if isinstance(doc, dict) else type(doc).__name__})")
    for key, kind in (("users", list), ("user_data", dict), ("num_samples", list)):
        if key in doc and not isinstance(doc[key], kind):
            raise DatasetError(f"{f}: '{key}' is a {type(doc[key]).__name__}; LEAF's '{key}' is a "
                               f"{'JSON object' if kind is dict else 'list'}; the file is damaged, regenerate it")
    return doc


def load_leaf(path: str | Path, vocab: Optional[str] = None) -> ArraySet:
    """Every user's samples of a LEAF JSON file (or a directory of them), users in file order."""
    xs: list = []
    ys: list = []
    users: list[int] = []
    names: list[str] = []
    for f in _files(Path(path)):
        doc = _read(f)
        counts = doc.get("num_samples")
        for k, u in enumerate(doc["users"]):
            if not isinstance(u, (str, int)) or isinstance(u, bool):
                raise DatasetError(f"{f}: users[{k}] is a {type(u).__name__}; user ids are strings")
            ud = doc["user_data"].get(u)
            if not isinstance(ud, dict) or "x" not in ud or "y" not in ud:
                raise DatasetError(f"{f}: user {u!r} has no user_data entry with 'x' and 'y'")
            if not isinstance(ud["x"], list) or not isinstance(ud["y"], list):
                raise DatasetError(f"{f}: user_data[{u!r}]: 'x' and 'y' must be lists (got "
                                   f"{type(ud['x']).__name__}, {type(ud['y']).__name__})")
            if len(ud["x"]) != len(ud["y"]):
                raise DatasetError(f"{f}: user {u!r} has {len(ud['x'])} samples but {len(ud['y'])} labels")
            if counts is not None and k < len(counts) and counts[k] != len(ud["y"]):
                raise DatasetError(f"{f}: num_samples says user {u!r} has {counts[k]} samples, user_data "
                                   f"holds {len(ud['y'])}; the file is damaged, regenerate it")
            uid = len(names)
            names.append(str(u))
            xs.extend(ud["x"])
            ys.extend(ud["y"])
            users.extend([uid] * len(ud["y"]))
    if not ys:
        raise DatasetError(f"{path}: no samples in any user")
    u = np.asarray(users, dtype=np.int64)
    if isinstance(xs[0], str):
        return _text(xs, ys, u, names, vocab or SHAKESPEARE_VOCAB, str(path))
    return _images(xs, ys, u, names, str(path))


def _text(xs, ys, users, names, vocab: str, where: str) -> ArraySet:
    index = {c: i for i, c in enumerate(vocab)}
    if not all(isinstance(s, str) for s in xs):
        raise DatasetError(f"{where}: some samples are text and some are not; a LEAF set holds one kind")
    lengths = {len(s) for s in xs}
    if len(lengths) != 1:
        raise DatasetError(f"{where}: text samples have lengths {sorted(lengths)[:5]}; all must be equal")
    try:
        x = np.array([[index[c] for c in s] for s in xs], dtype=np.int64)
        y = np.array([index[c] for c in ys], dtype=np.int64)
    except KeyError as err:
        raise DatasetError(f"{where}: character {err.args[0]!r} is not in the vocabulary; give "
                           "dataset.vocab with every character the text uses") from None
    except TypeError:
        raise DatasetError(f"{where}: text samples must be strings and labels single characters") from None
    return ArraySet(x, y, list(vocab), users, names, vocab)


def _images(xs, ys, users, names, where: str) -> ArraySet:
    try:
        x = np.asarray(xs, dtype=np.float32)
        y = np.asarray(ys, dtype=np.int64)
    except (ValueError, TypeError, OverflowError):
        raise DatasetError(f"{where}: samples are not equal-length lists of numbers with integer labels") from None
    if y.ndim != 1:
        raise DatasetError(f"{where}: labels are not single integers")
    if x.ndim != 2:
        raise DatasetError(f"{where}: samples have shape {x.shape[1:]}; LEAF images are flat lists")
    side = int(round(np.sqrt(x.shape[1])))
    if side == 0 or side * side != x.shape[1]:
        raise DatasetError(f"{where}: {x.shape[1]} values per sample is not a square greyscale image")
    n = bounded.classes_of(y, where, "labels 'y'")
    bounded.require_finite(x, where, "samples 'x'")
    classes = FEMNIST_CLASSES if x.shape[1] == 784 and n <= 62 else [str(i) for i in range(n)]
    return ArraySet(x.reshape(-1, 1, side, side), y, classes, users, names)
