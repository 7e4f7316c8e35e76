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


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_local_steps_of_many_batches_are_the_bits_computed_here(tmp_path):
    """τ = 1,500 batches: their layouts (≈ 300 kB of JSON) travel in the slot, not in the message."""
    from edgebed import numerics
    from edgebed.device_agent.policies import LocalSteps
    from edgebed import wire
    numerics.enter("portable")
    rng = np.random.default_rng(1)
    data = SharedData(rng.integers(0, 255, (300, 28, 28), dtype=np.uint8), rng.integers(0, 10, 300), "mlp")
    here = Trainer("mlp", None, None, 2, 4, 0, data=data, index=np.arange(300, dtype=np.int32))
    batches = [here.batch() for _ in range(1500)]
    theta, _ = initial_theta("mlp", 4)
    with WorkerPool(1, tmp_path) as pool:
        pool.configure({"workload": {"name": "mlp", "args": {}}, "model_path": None, "seed": 4, "batch_size": 2,
                        "policy": {"name": "local-steps", "local_steps": 1500, "lr": 0.05},
                        "carry_buffers": False}, threads=1)
        values, loss = pool.result(pool.submit(theta, 7, batches, "the job"))
    local = Trainer("mlp", None, None, 2, 4, 0, data=data, index=np.arange(300, dtype=np.int32))
    fed = iter(batches)
    local.batch = lambda: next(fed)
    up = LocalSteps(local, 1500, 0.05).next(wire.Model(7, theta))
    assert values.tobytes() == up.values.tobytes() and loss == up.loss
