"""A restricted unpickler for data-set files (the CIFAR python pickles): plain containers, numbers,
strings, bytes and numpy arrays, never arbitrary objects.

``pickle.load`` on a downloaded file runs whatever callable the file names; ``SafeUnpickler`` only
resolves the few globals numpy's own array pickles use (``ndarray``, ``dtype``, the reconstructors)
and ``_codecs.encode`` (how Python 3 writes ``bytes`` at protocol 2). Anything else — ``os.system``,
a class of some package — is refused with ``DatasetError`` before it is called. Object arrays are
refused as well, so a loaded array holds numbers only.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from . import DatasetError

ALLOWED = frozenset({
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("_codecs", "encode"),
})


class SafeUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose ``find_class`` resolves only ``ALLOWED`` (module, name) pairs."""

    def __init__(self, file: BinaryIO, where: str):
        super().__init__(file, encoding="bytes")   # CIFAR's pickles were written by Python 2
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise DatasetError(f"{self.where}: the pickle asks for {module}.{name}, which a data-set file "
                               "never needs; refusing to load it (is this the right file? re-download it)")
        return super().find_class(module, name)


def _check(obj: Any, where: str) -> None:
    if isinstance(obj, np.ndarray) and obj.dtype.hasobject:
        raise DatasetError(f"{where}: holds an object array; a data-set file holds numbers only")
    if isinstance(obj, dict):
        for v in obj.values():
            _check(v, where)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _check(v, where)


def load(src: str | Path | bytes, where: str | None = None) -> Any:
    """The object pickled in file ``src`` (or in the bytes ``src``), through ``SafeUnpickler``."""
    where = where or str(src if not isinstance(src, bytes) else "<bytes>")
    try:
        if isinstance(src, bytes):
            obj = SafeUnpickler(io.BytesIO(src), where).load()
        else:
            with open(src, "rb") as f:
                obj = SafeUnpickler(f, where).load()
    except DatasetError:
        raise
    except OSError as err:
        raise DatasetError(f"{where}: can't read: {err}") from None
    except Exception as err:   # pickle raises many types on a damaged stream
        raise DatasetError(f"{where}: not a readable pickle ({type(err).__name__}: {err}); the file is "
                           "damaged or of another format — re-download it") from None
    _check(obj, where)
    return obj
