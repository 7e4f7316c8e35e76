"""The virtual clock's worker pool on its own: a worker's gradient is the bits ``Trainer.gradient`` computes here, for
batches of any layout and size (a job larger than its slot gets a new one), and results come back in
order whatever the window."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from edgebed.device_agent.trainer import SharedData, Trainer
from edgebed.emulator.runtimes.sim_pool import WorkerPool
from edgebed.models import initial_theta


@pytest.mark.slow   # two worker processes import torch
@pytest.mark.timeout(60)
def test_worker_gradients_are_the_bits_computed_here(tmp_path):
    from edgebed import numerics
    numerics.enter("portable")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (200, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, 200).astype(np.int64)
    data = SharedData(x, y, "cnn")      # channels_last batches: their strides travel with them
    here = Trainer("cnn", None, None, 10, 3, 0, data=data, index=np.arange(200, dtype=np.int32))
    theta, _ = initial_theta("cnn", 3)
    jobs = []
    for k, rows in enumerate((10, 10, 50, 10, 30, 10)):   # 50 rows: larger than the slot so far
        here.b = rows
        xb, yb = here.batch()
        assert xb.is_contiguous(memory_format=torch.channels_last)
        jobs.append((theta + np.float32(1e-3 * k), xb, yb))
    with WorkerPool(2, tmp_path, window=2) as pool:
        pool.configure({"workload": {"name": "cnn", "args": {}}, "model_path": None, "seed": 3, "batch_size": 10,
                        "policy": None, "carry_buffers": False}, threads=1)
        tickets = [pool.submit(t, k, [(xb, yb)], f"job {k}") for k, (t, xb, yb) in enumerate(jobs)]
        got = [pool.result(tk) for tk in reversed(tickets)][::-1]   # taken in any order
    for (t, xb, yb), (values, loss) in zip(jobs, got):
        here.b = len(yb)
        here.batch = lambda xb=xb, yb=yb: (xb, yb)
        grad, want = here.gradient(t)
        assert values.tobytes() == grad.tobytes() and loss == want
    assert all(w.proc.returncode is not None for w in pool.workers)
