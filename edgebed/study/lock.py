"""One driver per study directory: an exclusive lock file, so two ``study run``s can't interleave writes.

``<dir>/.edgebed-study.lock`` is held with ``flock`` for as long as the driver runs (the kernel drops
it when the process ends, however it ends, so a killed driver leaves no stale lock); it records who
holds it, for the error the second driver shows. On a network filesystem ``flock`` is only as good as
the filesystem's lock support (NFSv4 and Lustre have it; run drivers of one study on one host if not).
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Optional

from .spec import StudyError

NAME = ".edgebed-study.lock"


class StudyLock:
    """``with StudyLock(dir, what):`` — raises :class:`StudyError` naming the holder if it is taken."""

    def __init__(self, directory: Path, what: str):
        self.path = Path(directory) / NAME
        self.what = what
        self._fd: Optional[int] = None

    def __enter__(self) -> "StudyLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            who = (f"pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('since')}: "
                   f"{holder.get('command')}") if holder else "another process"
            raise StudyError(f"{self.path.parent}: another study driver is writing here ({who}). Wait for "
                             f"it to finish or stop it; `edgebed study status` shows its progress. Two "
                             "drivers on one directory would overwrite each other's status.") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S"), "command": self.what}).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)      # closing drops the flock; the file stays (harmless, reused)
            self._fd = None


def _read(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return json.loads(os.read(fd, 4096).decode() or "{}")
    except (OSError, ValueError):
        return {}
