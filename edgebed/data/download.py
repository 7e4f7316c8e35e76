"""``source: download``: fetch a data set's standard archive once, verify its digest, cache it.

The standard URLs (``STANDARD``) are those torchvision uses, with the md5 digests torchvision
publishes. ``base_url`` replaces the host part, for a mirror or a test server (``file://`` and
``http://127.0.0.1`` are what the tests use; nothing in the tests reaches another address).
A download that fails or does not match its digest is deleted, never kept.
"""
from __future__ import annotations

import hashlib
import shutil
import urllib.request
from pathlib import Path
from typing import Optional

from ..atomic import replacing
from . import DatasetError
from .cifar import URLS as CIFAR_URLS

_FASHION = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
# format -> [(url, algorithm, hex digest)]
STANDARD: dict[str, list[tuple[str, str, str]]] = {
    "cifar10": [CIFAR_URLS["cifar10"]],
    "cifar100": [CIFAR_URLS["cifar100"]],
    "fashion-mnist": [(_FASHION + "train-images-idx3-ubyte.gz", "md5", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
                      (_FASHION + "train-labels-idx1-ubyte.gz", "md5", "25c81989df183df01b3e8a0aad5dffbe"),
                      (_FASHION + "t10k-images-idx3-ubyte.gz", "md5", "bef4ecab320f06d8554ea6380940ec79"),
                      (_FASHION + "t10k-labels-idx1-ubyte.gz", "md5", "bb300cfdad3c16e7a12a480ee83cd310")],
}


def digest_of(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(url: str, dest: Path, algorithm: str, digest: Optional[str], timeout: float = 60.0) -> Path:
    """``url`` saved as ``dest`` (kept if already there with the right digest); ``digest`` None skips
    the check (only for a user's own mirror given without one)."""
    if dest.exists() and (digest is None or digest_of(dest, algorithm) == digest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with replacing(dest) as tmp:        # renamed into place only when complete and verified
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r, open(tmp, "wb") as f:
                shutil.copyfileobj(r, f)
        except (OSError, ValueError) as err:
            raise DatasetError(f"download of {url} failed: {err}; check the network or give "
                               "dataset.source: path with a local copy") from None
        got = digest_of(tmp, algorithm)
        if digest is not None and got != digest:
            raise DatasetError(f"{url}: {algorithm} {got} does not match the expected {digest}; the server "
                               "sent a different file, nothing was kept")
    return dest


def download(name: str, cache: str | Path, base_url: Optional[str] = None,
             digests: Optional[dict[str, str]] = None, timeout: float = 60.0) -> Path:
    """Every standard file of data set ``name`` into ``cache``; returns ``cache``. ``base_url``
    replaces everything before each file name; ``digests`` (file name → hex) replace the standard ones."""
    if name not in STANDARD:
        raise DatasetError(f"dataset {name!r} has no standard download; use one of {sorted(STANDARD)}, "
                           "or dataset.source: path")
    cache = Path(cache)
    for url, algorithm, digest in STANDARD[name]:
        fname = url.rsplit("/", 1)[1]
        if base_url is not None:
            url = base_url.rstrip("/") + "/" + fname
        if digests is not None:
            digest = digests.get(fname)
        fetch(url, cache / fname, algorithm, digest, timeout)
    return cache
