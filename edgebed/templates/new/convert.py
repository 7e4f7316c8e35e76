"""Convert your data set into the ``.npz`` files edgebed reads (``dataset.format: npz``).

Replace ``read_split`` with a reader of your format: it returns the samples ``x`` as an array
(N, C, H, W) (uint8 images or float32) and the labels ``y`` as integers 0..classes-1 (N,). As written it
reads the digits bundled with edgebed, so ``python convert.py`` works before you change anything.
Then point the scenario at the files (see the comment in scenario.yaml):

    python convert.py            # writes data/train.npz and data/test.npz
    edgebed validate scenario.yaml
"""
from pathlib import Path

import numpy as np


def read_split(split: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of ``split`` ("train" or "test") — replace with your own reader (CSV, HDF5, images...)."""
    from edgebed.data import load_bundled
    ds = load_bundled(test_fraction=0.2)
    x, y = (ds.train_x, ds.train_y) if split == "train" else (ds.test_x, ds.test_y)
    return x[:, None, :, :], y          # (N, 28, 28) → (N, 1, 28, 28): one channel


def main(out: Path = Path(__file__).resolve().parent / "data") -> None:
    out.mkdir(exist_ok=True)
    for split in ("train", "test"):
        x, y = read_split(split)
        if len(x) != len(y) or y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            raise SystemExit(f"{split}: need x (N, C, H, W) and integer labels y (N,); got "
                             f"{x.shape} and {y.dtype} {y.shape}")
        np.savez(out / f"{split}.npz", x=x, y=y.astype(np.int64))   # np.savez: read lazily, per shard
        print(f"{out / f'{split}.npz'}: {len(y)} samples of shape {tuple(x.shape[1:])}, "
              f"{int(y.max()) + 1} classes")


if __name__ == "__main__":
    main()
