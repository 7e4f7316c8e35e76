"""Paper-equivalent bytes: the size of an update in the original AdaComp implementation's encoding.

Hardy et al.'s devices sent Python lists pickled with protocol 2: a dense update is the list of its
float values, a sparse one the pair ``(indices, values)`` of two lists (flat positions in Θ, as in
our wire format). Our wire sends float32 + uint32 arrays, so the two byte counts are in different
units; this module counts the paper's unit exactly from pickle's opcodes (CPython ``pickle``,
protocol 2, the same opcodes Python 2's cPickle wrote):

- ``PROTO 2`` (2 B) … ``STOP`` (1 B); a tuple of two: ``TUPLE2`` (1 B) + its memo ``BINPUT`` (2 B);
- a list: ``EMPTY_LIST`` (1 B) + ``BINPUT`` (2 B), then its items in batches of 1,000: a batch of
  items is framed by ``MARK`` … ``APPENDS`` (2 B), except a one-item list (``APPEND``, 1 B);
- a float: ``BINFLOAT`` (9 B: a Python float is a double, whatever the float32 it came from);
- an int i ≥ 0: ``BININT1`` (2 B) if i < 256, ``BININT2`` (3 B) if i < 65,536, else ``BININT`` (5 B).

Which indices a push holds is not recorded per update, so the *expected* size of a sparse push
assumes its kept positions are spread uniformly within each tensor (AdaComp's top-c per layer:
``keep_count`` entries of each tensor) or over the whole model (Comp-ASGD's global top-c). Against
real pickles of real gradients (20 batches of the untrained models) the model is exact for dense
updates; for sparse ones its mean is within 1 % for the CNN and within 4.1 % for the MLP, whose
top entries cluster (``tests/unit/analysis/test_paper_bytes.py``, ``benchmarks/paper_bytes.py`` →
``benchmarks/results/paper_bytes.json``). Given the indices, ``pickle_size`` is exact.
"""
from __future__ import annotations

import functools
import json
import math
from functools import lru_cache
from typing import Sequence

FLOAT = 9          # BINFLOAT + 8-byte double
BATCH = 1000       # pickle's list batch size
HEADER = 2 + 1     # PROTO 2 + STOP
TUPLE = 1 + 2      # TUPLE2 + BINPUT


def list_overhead(n: int) -> int:
    """Bytes of a pickled list of ``n`` items beyond the items themselves."""
    # CPython's pickler frames every batch with MARK … APPENDS, except a list of exactly one item
    return 1 + 2 + (1 if n == 1 else 2 * -(-n // BATCH))


def int_size(i: int) -> int:
    """Bytes of one non-negative int in protocol 2."""
    return 2 if i < 256 else 3 if i < 65536 else 5


def int_bytes_in(lo: int, hi: int) -> int:
    """Sum of ``int_size(i)`` for i in [lo, hi)."""
    total = 0
    for start, end, size in ((0, 256, 2), (256, 65536, 3), (65536, math.inf, 5)):
        total += max(0, min(hi, end) - max(lo, start)) * size
    return int(total)


def dense_bytes(n: int) -> int:
    """Pickle protocol 2 of a list of ``n`` floats (a dense update): exact."""
    return HEADER + list_overhead(n) + FLOAT * n


def sparse_bytes(index_bytes: float, k: int) -> float:
    """Pickle protocol 2 of ``(indices, values)`` with ``k`` entries whose ints take ``index_bytes``."""
    return HEADER + TUPLE + 2 * list_overhead(k) + index_bytes + FLOAT * k


def pickle_size(indices: Sequence[int] | None, n_values: int) -> int:
    """Exact size of one update's pickle from its actual indices (None: dense)."""
    if indices is None:
        return dense_bytes(n_values)
    return int(sparse_bytes(sum(int_size(int(i)) for i in indices), len(indices)))


def expected_sparse(layers: Sequence[tuple[int, int]], counts: Sequence[int]) -> float:
    """Expected pickle size when ``counts[j]`` positions are drawn uniformly in layer j
    (``layers[j] = (offset, size)`` in the flat Θ)."""
    index_bytes = sum(k * int_bytes_in(off, off + size) / size for (off, size), k in zip(layers, counts))
    return sparse_bytes(index_bytes, sum(counts))


@lru_cache(maxsize=64)
def _layers(name: str, args: str) -> tuple[tuple[int, int], ...]:
    from ..models import model_layers     # no CPU kernel runs: see model_layers
    return tuple((l.offset, l.size) for l in model_layers({"name": name, "args": json.loads(args)}))


def _key(model) -> tuple[str, str]:
    """(name, its args as sorted JSON) of a registry key / import path or a model section."""
    if isinstance(model, dict) or hasattr(model, "args"):
        get = model.get if isinstance(model, dict) else functools.partial(getattr, model)
        return str(get("name")), json.dumps(get("args", None) or {}, sort_keys=True)
    return str(model), "{}"


def per_update(model, algorithm: str, c: float) -> float:
    """Expected paper-encoding bytes of one push of ``algorithm`` at ratio ``c`` on ``model`` (a
    registry key or import path, or a model section with its ``args``: the model of that size).

    By the rule's compressor: dense (asgd, every averaging rule) → the dense list; top-c of each
    tensor (adacomp); top-c over the whole model (comp-asgd)."""
    from ..compression import SELECTORS
    from ..algorithms import ALGORITHMS
    layers = _layers(*_key(model))
    kind = ALGORITHMS[algorithm].compressor if algorithm in ALGORITHMS else "dense"
    kept = SELECTORS[kind].kept(c, layers)
    if kept is None:
        return float(dense_bytes(sum(size for _, size in layers)))
    return expected_sparse(*kept)


def real_pickle_size(indices, values) -> int:
    """The bytes the original implementation sent for this update: a real pickle (protocol 2) of
    its Python lists — what ``pickle_size`` models, for checking it."""
    import pickle
    obj = values.tolist() if indices is None else (indices.tolist(), values.tolist())
    return len(pickle.dumps(obj, protocol=2))


def sample_gradients(model: str, k: int) -> tuple[list, tuple]:
    """(k real gradients of the untrained ``model`` (seed 1) on consecutive batches of 10 bundled
    digits, its layers): the sample the byte model is checked against."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from ..data import load_bundled, normalize
    from ..models import build_model, grad_flat, initial_theta
    ds, m = load_bundled(0.2), build_model(model, 1)
    out = []
    for b in range(k):
        m.zero_grad()
        x = torch.from_numpy(normalize(ds.train_x[10 * b:10 * b + 10]))
        F.cross_entropy(m(x), torch.from_numpy(ds.train_y[10 * b:10 * b + 10].astype(np.int64))).backward()
        out.append(grad_flat(m))
    return out, initial_theta(model, 1)[1]
