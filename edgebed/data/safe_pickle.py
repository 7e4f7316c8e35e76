"""A restricted unpickler for files from outside (the CIFAR python pickles; FedScale's trace pickles,
``traces/fedscale.py``, with nothing allowed): plain containers, numbers, strings, bytes and numpy
arrays, never arbitrary objects.

``pickle.load`` on a downloaded file runs whatever callable the file names; ``SafeUnpickler`` only
resolves the few globals numpy's own array pickles use (``ndarray``, ``dtype``, the reconstructors)
and ``_codecs.encode`` (how Python 3 writes ``bytes`` at protocol 2). Anything else — ``os.system``,
a class of some package — is refused with ``DatasetError`` before it is called. Object arrays are
refused as well, so a loaded array holds numbers only. The file is read under ``bounded``'s byte limit,
and the loaded object is checked once per object (shared references cost once; a container that
holds itself is refused), under its node and depth limits.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np

from . import DatasetError, bounded

ALLOWED = frozenset({
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    ("_codecs", "encode"),
})


Refusal = Callable[[str], Exception]   # the error to raise, given its message


class SafeUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` whose ``find_class`` resolves only the ``allowed`` (module, name) pairs
    (default ``ALLOWED``: numpy's arrays) and which takes no persistent ids. A refusal is ``error``
    (default ``DatasetError``), its message naming the global and saying ``why`` it is not needed."""

    def __init__(self, file: BinaryIO, where: str, allowed: frozenset = ALLOWED, error: Refusal = DatasetError,
                 why: str = ", which a data-set file never needs; refusing to load it (is this the right file? "
                            "re-download it)", encoding: str = "bytes"):
        super().__init__(file, encoding=encoding)   # "bytes": CIFAR's pickles were written by Python 2
        self.where, self.allowed, self.error, self.why = where, allowed, error, why

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.allowed:
            raise self.error(f"{self.where}: the pickle asks for {module}.{name}{self.why}")
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise self.error(f"{self.where}: the pickle uses persistent ids, which no file read here needs")


def _check(obj: Any, where: str, error: Refusal, limit_error) -> None:
    def visit(o: Any) -> None:
        if isinstance(o, np.ndarray) and o.dtype.hasobject:
            raise error(f"{where}: holds an object array; a data-set file holds numbers only")
    bounded.walk(obj, where, visit, limit_error, error)


def load(src: str | Path | bytes, where: str | None = None, hint: str = " — re-download it",
         limit_error: type = bounded.LimitError, **restrict) -> Any:
    """The object pickled in file ``src`` (or in the bytes ``src``), through ``SafeUnpickler``;
    ``restrict``: its ``allowed``, ``error``, ``why`` and ``encoding`` (default: a data-set file's);
    ``hint`` ends the message for a damaged file; ``limit_error``: what a file over a limit raises.
    Object arrays are refused too."""
    where = where or str(src if not isinstance(src, bytes) else "<bytes>")
    error = restrict.get("error", DatasetError)
    try:
        raw = src if isinstance(src, bytes) else bounded.read_bytes(src, limit_error)
        obj = SafeUnpickler(io.BytesIO(raw), where, **restrict).load()
    except (error, bounded.LimitError):
        raise
    except OSError as err:
        raise error(f"{where}: can't read: {err}") from None
    except Exception as err:   # pickle raises many types on a damaged stream
        raise error(f"{where}: not a readable pickle ({type(err).__name__}: {err}); the file is "
                    f"damaged or of another format{hint}") from None
    _check(obj, where, error, limit_error)
    return obj
