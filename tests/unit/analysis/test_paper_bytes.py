"""The paper-encoding byte model against real pickles (protocol 2) of real compressed updates."""
from __future__ import annotations

import functools
import pickle

import numpy as np
import pytest

from edgebed.analysis import paper_bytes as pb
from edgebed.compression import make_compressor
from edgebed.models import initial_theta


_pickled = pb.real_pickle_size


@pytest.mark.parametrize("n", [0, 1, 2, 999, 1000, 1001, 2000, 2001])
def test_dense_list_size_is_exact_at_every_batch_boundary(n):
    assert pb.dense_bytes(n) == _pickled(None, np.arange(n, dtype=np.float32))


def test_a_dense_cnn_update_is_the_issues_1_906_mb():
    theta, _ = initial_theta("cnn", 0)
    assert pb.dense_bytes(theta.size) == _pickled(None, theta) == 1_905_640
    assert pb.per_update("cnn", "asgd", 0.0) == 1_905_640


@functools.cache
def _real_gradients(model: str, k: int = 8) -> tuple[list[np.ndarray], tuple]:
    return pb.sample_gradients(model, k)


@pytest.mark.parametrize("model,tolerance", [("cnn", 0.01), ("mlp", 0.05)])
@pytest.mark.parametrize("compressor,algorithm", [("top-c-per-layer", "adacomp"), ("top-c", "comp-asgd")])
@pytest.mark.parametrize("c", [0.1, 0.01, 0.001])
def test_model_matches_real_pickles_of_real_gradients(model, tolerance, compressor, algorithm, c):
    grads, layers = _real_gradients(model)
    real = []
    for g in grads:
        sp = make_compressor(compressor, c, layers).compress(g)
        real.append(_pickled(sp.indices, sp.values))
        assert pb.pickle_size(sp.indices, sp.values.size) == real[-1]      # exact from the indices
    # without the indices (a run records only how many were sent): the expected size, uniform
    # positions per tensor; the MLP's top entries cluster, hence its wider tolerance
    assert pb.per_update(model, algorithm, c) == pytest.approx(np.mean(real), rel=tolerance)


def test_int_sizes_follow_picklings_opcodes():
    for i in (0, 255, 256, 65535, 65536, 211_689):
        assert pb.int_size(i) == len(pickle.dumps(i, protocol=2)) - 3      # minus PROTO 2 + STOP
    assert pb.int_bytes_in(250, 70000) == sum(pb.int_size(i) for i in range(250, 70000))


def test_a_model_section_with_args_is_counted_at_its_own_size():
    """A compact result of a zoo run (resnet20 at depth 8, width 8: 19,810 parameters) counts the
    paper bytes of that model, not of the registry entry's default ResNet-20 (272,474)."""
    section = {"name": "resnet20", "args": {"depth": 8, "width": 8, "in_channels": 1, "size": 28}}
    assert pb.per_update(section, "asgd", 0.0) == pb.dense_bytes(19_810)
    assert pb.per_update({"name": "cnn"}, "asgd", 0.0) == pb.per_update("cnn", "asgd", 0.0) == 1_905_640
