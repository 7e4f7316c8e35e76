"""Atomic file writes: write a temporary sibling, then rename it over the target — the one helper
for every file edgebed writes (run tables, JSON, keys, checkpoints, reports, downloads), so a crash or
a kill at any moment leaves the old file or the new one, never a torn one. Imports nothing heavy (the
agents use it)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional


@contextmanager
def replacing(path: str | Path, mode: Optional[int] = None, durable: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; when the block ends without an error it is renamed to
    ``path``, otherwise removed. ``mode``: create the temporary file with these permissions first (no
    window where, e.g., a private key is world-readable). ``durable``: fsync the file and the directory
    too, so the rename survives a power cut."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    if mode is not None:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode))
    try:
        yield tmp
        if durable:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
