"""Reused gradient buffers (device_agent/gradbuf.py): a dense gradient's memory is written again only
once nothing holds the array any more, and a trainer writing into a reused buffer gives the very bits
of one that allocates (so the virtual clock's results cannot change)."""
from __future__ import annotations

import numpy as np
import pytest

from edgebed.device_agent.gradbuf import GradientBuffers
from edgebed.device_agent.trainer import SharedData, Trainer


@pytest.mark.timeout(30)
def test_a_buffer_is_reused_only_once_nothing_holds_it():
    pool = GradientBuffers()
    a = pool.take(10)
    assert a.shape == (10,) and a.dtype == np.float32
    pool.give(a)
    first = id(a)
    held = [a, a[2:5]]          # the push in flight, and a view of it (as the PS takes of Θ's weights)
    del a
    b = pool.take(10)
    assert id(b) != first                   # still held: a fresh buffer
    view = held.pop()
    assert id(pool.take(10)) != first       # the view alone keeps it too
    del view
    held.clear()                            # nothing holds it now
    c = pool.take(10)
    assert id(c) == first                   # its memory again
    pool.give(c)
    del c
    assert pool.take(7).size == 7 and len(pool) == 0   # free but another size: let go, a new one made


@pytest.mark.timeout(60)
def test_gradients_into_reused_buffers_are_the_same_bits():
    rng = np.random.default_rng(0)
    x = rng.random((64, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    data = SharedData(x, y, "mlp", "cpu")
    index = np.arange(64, dtype=np.int32)
    plain = Trainer("mlp", None, None, 8, 0, 3, data=data, index=index)
    pooled = Trainer("mlp", None, None, 8, 0, 3, data=data, index=index, buffers=GradientBuffers())
    theta = rng.standard_normal(sum(layer.size for layer in plain.layers)).astype(np.float32) * 0.05
    for _ in range(4):
        g1, l1 = plain.gradient(theta)
        g2, l2 = pooled.gradient(theta)
        assert g2.dtype == np.float32 and np.array_equal(g1.view(np.uint32), g2.view(np.uint32)) and l1 == l2
        pooled.buffers.give(g2)
        del g2


@pytest.mark.timeout(30)
def test_an_array_handed_back_again_and_again_does_not_grow_the_pool(monkeypatch):
    from edgebed.device_agent import gradbuf
    monkeypatch.setattr(gradbuf, "KEEP", 16)
    pool = GradientBuffers()
    kept = np.zeros(4, np.float32)   # e.g. a compressor's own buffer, sent as every push
    for _ in range(100):
        pool.give(kept)
    assert len(pool) == 16 and pool.take(4) is not kept
