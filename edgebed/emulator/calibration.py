"""What the timing model needs measured or encoded on this host: the seconds of one SGD step
(``calibrate_step_time``, a real Trainer) and the exact payload bytes of a cycle's messages
(``message_sizes``, real wire messages). ``timing_setup`` calls both; ``timing`` stays pure arithmetic.
"""
from __future__ import annotations

import time

import numpy as np

from .. import timing as tm, wire
from ..compression import make_compressor
from ..algorithms import ALGORITHMS


def message_sizes(model: str, algorithm: str, c: float, seed: int = 0) -> tm.MessageSizes:
    """Exact sizes from encoding real messages for this model and update rule (imports torch)."""
    from ..models import initial_theta
    theta, layers = initial_theta(model, seed)
    update = make_compressor(ALGORITHMS[algorithm].compressor, c, layers).compress(
        np.random.default_rng(seed).standard_normal(theta.size).astype(np.float32))
    size = lambda m: wire.frames_nbytes(wire.encode(m))  # noqa: E731
    session = "0" * 32
    return tm.MessageSizes(size(wire.Pull(session)), size(wire.Model(10**6, theta)),
                           size(wire.Push(session, 10**6, 10**6, update.values, update.indices, 1.0)),
                           size(wire.Ack(10**6, True, False)))


def calibrate_step_time(model: str, batch_size: int, algorithm: str, c: float, seed: int = 0,
                        steps: int = 30, data: tuple | None = None) -> float:
    """Median seconds of one SGD step (gradient + compression, one thread) on this host now, on
    synthetic samples of the data set's ``data = (sample shape, classes)`` (default: the workload's)."""
    import torch

    from ..device_agent.trainer import Trainer
    from ..models import get_flat
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from ..workload import resolve
        w = resolve(model)
        shape, classes = (tuple(data[0]), int(data[1])) if data else (tuple(w.input_shape), w.num_classes)
        rng = np.random.default_rng(seed)
        n = max(64, batch_size * 4)
        if w.input_dtype == "int64":     # token ids
            x = rng.integers(0, classes, (n, *shape), dtype=np.int64)
        elif shape == (1, 28, 28):   # the IDX layout, normalised as the data path does
            x = rng.integers(0, 255, (n, 28, 28), dtype=np.uint8)
        else:                            # other images: already normalised when loaded
            x = rng.standard_normal((n, *shape), dtype=np.float32)
        y = rng.integers(0, classes, n, dtype=np.int64)
        tr = Trainer(model, x, y, batch_size, seed, 0)
        comp = make_compressor(ALGORITHMS[algorithm].compressor, c, tr.layers)
        theta = get_flat(tr.model)
        comp.compress(tr.gradient(theta)[0])   # warm-up
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            comp.compress(tr.gradient(theta)[0])
            times.append(time.perf_counter() - t0)
        return float(np.median(times))
    finally:
        torch.set_num_threads(threads)
