"""torchvision-style ``ImageFolder``: one subdirectory per class, images (PNG, JPEG, ...) inside.

Classes are the subdirectory names in sorted order (label = index), as torchvision does. Images are
decoded with Pillow (installed with matplotlib, a dependency of edgebed) into uint8 ``(N, C, H, W)``:
``channels`` 1 (greyscale, mode ``L``) or 3 (``RGB``), by default 1 if the first image is greyscale
and 3 otherwise. Every image must have the same size unless ``size=(H, W)`` resizes them. An image is
refused by the size its header declares (``bounded.open_image``), and a file or class folder that is
a symbolic link out of the folder is refused unless ``follow_symlinks`` (``dataset.options.follow_symlinks``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from . import DatasetError, bounded
from .arrayset import ArraySet

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise DatasetError("reading images needs Pillow; pip install pillow") from None
    return Image


def decode_image(raw_or_path, channels: Optional[int], size: Optional[tuple[int, int]], where: str) -> np.ndarray:
    """One image file (a path or its bytes) → uint8 ``(C, H, W)``."""
    _pil()
    import io
    try:
        src = io.BytesIO(raw_or_path) if isinstance(raw_or_path, (bytes, bytearray)) else raw_or_path
        with bounded.open_image(src, where) as im:
            if channels is None:
                channels = 1 if im.mode in ("1", "L", "I", "I;16", "F") else 3
            im = im.convert("L" if channels == 1 else "RGB")
            if size is not None:
                im = im.resize((size[1], size[0]))
            a = np.asarray(im, dtype=np.uint8)
    except DatasetError:
        raise
    except Exception as err:  # noqa: BLE001 — Pillow's decoders raise OSError, SyntaxError, zlib.error, ... on damage
        raise DatasetError(f"{where}: not a readable image ({type(err).__name__}: {err}); remove it or "
                           "replace it") from None
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def _inside(f: Path, root: Path, follow: bool) -> Path:
    """``f``, refused when it resolves outside ``root`` (a symbolic link out) unless ``follow``."""
    if not follow and not f.resolve().is_relative_to(root):
        raise DatasetError(f"{f}: a symbolic link out of the ImageFolder {root} (to {f.resolve()}); copy the "
                           "file in, or set dataset.options.follow_symlinks: true if the link is meant")
    return f


def load_imagefolder(path: str | Path, channels: Optional[int] = None,
                     size: Optional[tuple[int, int]] = None, follow_symlinks: bool = False) -> ArraySet:
    """Every image under ``path/<class>/`` (files with an image extension; others are ignored)."""
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such directory; an ImageFolder is a directory with one "
                           "subdirectory of images per class")
    real = root.resolve()
    classes = sorted(_inside(p, real, follow_symlinks).name for p in root.iterdir()
                     if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DatasetError(f"{root}: no class subdirectories; put each class's images in "
                           f"{root}/<class name>/")
    xs, ys = [], []
    for label, name in enumerate(classes):
        files = sorted(_inside(f, real, follow_symlinks) for f in (root / name).rglob("*")
                       if f.suffix.lower() in EXTENSIONS and f.is_file())
        for f in files:
            img = decode_image(f, channels, size, str(f))
            channels = img.shape[0]
            if xs and img.shape != xs[0].shape:
                raise DatasetError(f"{f}: image is {img.shape[2]}×{img.shape[1]} with {img.shape[0]} channels "
                                   f"but {xs[0].shape[2]}×{xs[0].shape[1]} with {xs[0].shape[0]} before it; "
                                   "resize the images to one size or give dataset.size: [H, W]")
            xs.append(img)
            ys.append(label)
    if not xs:
        raise DatasetError(f"{root}: no images ({', '.join(EXTENSIONS)}) in its class subdirectories")
    return ArraySet(np.stack(xs), np.asarray(ys, dtype=np.int64), classes)
