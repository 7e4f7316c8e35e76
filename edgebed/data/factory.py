"""A data set from the user's own Python code by import path (``module:attr``, the Flower / Hydra habit).

``attr`` must be a callable (a function or class) outside Python's standard library (``usercode.py``
refuses the others before importing or calling them); it is called with the scenario's ``args`` and
may give: an ``ArraySet``; a pair ``(x, y)`` of arrays; a mapping with ``x`` and ``y`` (and optionally
``classes``, ``users``); or a map-style PyTorch ``Dataset`` (``len`` and ``ds[i] -> (x, y)``), whose
samples are stacked (tensors become numpy arrays through ``__array__``; torch is not imported here).
"""
from __future__ import annotations

import importlib
from typing import Any, Mapping, Optional

import numpy as np

from .. import usercode
from . import DatasetError, bounded
from .arrayset import ArraySet

KEY = "dataset.options.factory"


def resolve(target: str) -> Any:
    """The callable ``module:attr`` names (``attr`` may be dotted)."""
    mod_name, sep, attr = target.partition(":")
    if not sep or not mod_name or not attr:
        raise DatasetError(f"dataset.factory {target!r}: write it as 'package.module:function'")
    try:
        usercode.check_module(mod_name, KEY, target, "a data set")
    except usercode.UserCodeError as err:
        raise DatasetError(str(err)) from None
    try:
        obj = importlib.import_module(mod_name)
    except ImportError as err:
        raise DatasetError(f"dataset.factory {target!r}: can't import {mod_name} ({err}); is its "
                           "directory on PYTHONPATH?") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise DatasetError(f"dataset.factory {target!r}: {mod_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    try:
        usercode.check_target(obj, KEY, target, "a data set", "it returns an ArraySet, (x, y), "
                              "{'x': ..., 'y': ...} or a map-style Dataset of (x, y) pairs")
    except usercode.UserCodeError as err:
        raise DatasetError(str(err)) from None
    return obj


def _classes(y: np.ndarray, given: Optional[list], target: str = "") -> list[str]:
    if given is not None:
        return [str(c) for c in given]
    return [str(i) for i in range(bounded.classes_of(y, f"dataset.factory {target!r}", "labels"))]


def load_factory(target: str, args: Optional[Mapping[str, Any]] = None) -> ArraySet:
    """Call (or take) what ``target`` names and turn its result into an ``ArraySet``."""
    obj = resolve(target)
    made = obj(**dict(args or {}))
    if isinstance(made, ArraySet):
        return made
    if isinstance(made, tuple) and len(made) == 2:
        x, y = np.asarray(made[0]), np.asarray(made[1]).astype(np.int64)
        return ArraySet(x, y, _classes(y, None, target))
    if isinstance(made, Mapping) and {"x", "y"} <= made.keys():
        y = np.asarray(made["y"]).astype(np.int64)
        users = made.get("users")
        names: list[str] = []
        if users is not None:
            uniq, users = np.unique(np.asarray(users), return_inverse=True)
            names = [str(u) for u in uniq]
        return ArraySet(np.asarray(made["x"]), y, _classes(y, made.get("classes"), target),
                        None if users is None else users.astype(np.int64), names)
    if hasattr(made, "__len__") and hasattr(made, "__getitem__"):
        n = len(made)
        if n == 0:
            raise DatasetError(f"dataset.factory {target!r}: the Dataset is empty")
        pairs = [made[i] for i in range(n)]
        if not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
            raise DatasetError(f"dataset.factory {target!r}: a Dataset's items must be (x, y) pairs")
        x = np.stack([np.asarray(p[0]) for p in pairs])
        y = np.asarray([int(np.asarray(p[1])) for p in pairs], dtype=np.int64)
        return ArraySet(x, y, _classes(y, getattr(made, "classes", None), target))
    raise DatasetError(f"dataset.factory {target!r} gave {type(made).__name__}; return an ArraySet, "
                       "(x, y), {'x': ..., 'y': ...} or a map-style Dataset of (x, y) pairs")
