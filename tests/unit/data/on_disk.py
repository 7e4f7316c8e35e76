"""Small data-set files in their real on-disk layouts, written for the data tests."""
import pickle

import numpy as np


def write_cifar10(root, n_per_batch=4, seed=0):
    """CIFAR-10's python layout: dicts with bytes keys, pickled at protocol 2 as the originals."""
    rng = np.random.default_rng(seed)
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    with open(d / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": names, b"num_cases_per_batch": n_per_batch, b"num_vis": 3072}, f, protocol=2)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"batch_label": name.encode(), b"labels": rng.integers(0, 10, n_per_batch).tolist(),
                 b"data": rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8),
                 b"filenames": [b"x.png"] * n_per_batch}
        with open(d / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    return d
