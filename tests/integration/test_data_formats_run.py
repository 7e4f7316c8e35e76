"""A scenario's data set in the shipped formats beyond 28×28 IDX trains with its own sample shape and
class count: a CIFAR-format set (3×32×32, written here) on the virtual clock and on the local runtime
(real agent processes that load their shard), an ``.npz`` with a Dirichlet partition, and LEAF
Shakespeare text with its natural per-speaker partition and the zoo's char-LSTM."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import parse_scenario

pytestmark = pytest.mark.timeout(300)

LINEAR = textwrap.dedent('''
    from torch import nn

    def linear(in_features=3072, num_classes=10):
        return nn.Sequential(nn.Flatten(), nn.Linear(in_features, num_classes))
''')


def write_learnable_cifar10(root, n=100, seed=0):
    """CIFAR-10's python layout whose classes can be told apart: class c brightens channel c % 3
    by 19·c over noise in 0..59 (chance is 0.1, a linear model learns it in a few hundred steps)."""
    rng = np.random.default_rng(seed)
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    with open(d / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)]}, f, protocol=2)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        y = rng.integers(0, 10, n)
        x = rng.integers(0, 60, (n, 3, 32, 32)).astype(np.uint8)
        for i, c in enumerate(y):
            x[i, c % 3] += np.uint8(19 * c)
        with open(d / name, "wb") as f:
            pickle.dump({b"labels": y.tolist(), b"data": x.reshape(n, 3072)}, f, protocol=2)
    return root


def _user_module(tmp_path):
    (tmp_path / "user" / "unets").mkdir(parents=True)
    (tmp_path / "user" / "unets" / "__init__.py").write_text("")
    (tmp_path / "user" / "unets" / "lin.py").write_text(LINEAR)
    return str(tmp_path / "user")


def _run(tmp_path, dataset: dict, model: dict, runtime="sim", updates=200, n=4, every=100):
    sc = parse_scenario({"name": f"fmt-{runtime}", "seed": 1, "dataset": dataset, "model": model,
                         "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10}, "workers": {"n": n},
                         "stop": {"updates": updates, "wall_time": "4min"}, "eval": {"every": every},
                         "runtime": {"name": runtime}})
    try:
        return Engine(sc, tmp_path / "runs").run()
    finally:
        for name in [m for m in sys.modules if m.startswith("unets")]:
            del sys.modules[name]


@pytest.mark.parametrize("runtime", ["sim", "local"])
def test_a_cifar_format_set_trains_with_its_shape_and_classes(runtime, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    root = write_learnable_cifar10(tmp_path / "c10")
    run = _run(tmp_path, {"format": "cifar10", "path": str(root)},
               {"name": "unets.lin:linear", "path": _user_module(tmp_path)}, runtime)
    assert run.summary["status"] == "complete" and run.summary["updates"] == 200
    assert set(read_table(run.path, "updates")["entries"]) == {3072 * 10 + 10}   # Θ of a 3×32×32 input
    evals = read_table(run.path, "evals").sort_values("update")
    assert evals["accuracy"].iloc[-1] > 0.8                    # chance 0.1: the images reached the model
    part = json.loads((run.path / "manifest.json").read_text())["partition"]
    assert sum(part["samples"]) == 500 and all(len(h) == 10 for h in part["label_histogram"])


def test_an_npz_set_with_a_dirichlet_partition_and_validate_reads_its_shape(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, 600)
    x = (rng.standard_normal((600, 2, 6, 6)) + y[:, None, None, None]).astype(np.float32)
    np.savez(tmp_path / "set.npz", x=x, y=y)
    user = _user_module(tmp_path)
    dataset = {"format": "npz", "path": str(tmp_path / "set.npz"), "test_fraction": 0.25,
               "partition": "dirichlet", "alpha": 0.5, "min_size": 20}
    run = _run(tmp_path, dataset, {"name": "unets.lin:linear", "args": {"in_features": 72, "num_classes": 4},
                                   "path": user}, n=3)
    assert run.summary["status"] == "complete"
    part = json.loads((run.path / "manifest.json").read_text())["partition"]
    assert part["scheme"] == "dirichlet" and sum(part["samples"]) == 450 and len(part["label_histogram"][0]) == 4
    assert read_table(run.path, "evals")["accuracy"].iloc[-1] > 0.6   # chance 0.25
    # validate builds the model against the set's 2×6×6 samples and 4 classes, and says what is wrong
    base = ("name: v\nworkers: {n: 3}\nstop: {updates: 10}\nruntime: {name: sim}\n"
            f"dataset: {json.dumps(dataset)}\n")
    (tmp_path / "ok.yaml").write_text(
        base + "model: {name: 'unets.lin:linear', args: {in_features: 72, num_classes: 4}, path: user}\n")
    (tmp_path / "bad.yaml").write_text(base + "model: {name: 'unets.lin:linear', path: user}\n")
    ok = subprocess.run([sys.executable, "-m", "edgebed.cli", "validate", "ok.yaml"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "edgebed.cli", "validate", "bad.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "cannot take the data set's samples (2×6×6, 4 classes)" in bad.stderr


def test_leaf_shakespeare_trains_the_char_lstm_on_a_natural_partition(tmp_path):
    rng = np.random.default_rng(0)
    text = "to be or not to be that is the question whether tis nobler in the mind to suffer " * 8
    users, data = [], {}
    for u in ("HAMLET", "OPHELIA", "POLONIUS"):
        starts = rng.integers(0, len(text) - 81, 40)
        data[u] = {"x": [text[s:s + 80] for s in starts], "y": [text[s + 80] for s in starts]}
        users.append(u)
    doc = {"users": users, "num_samples": [40] * 3, "user_data": data}
    (tmp_path / "shakespeare.json").write_text(json.dumps(doc))
    run = _run(tmp_path, {"format": "leaf", "path": str(tmp_path / "shakespeare.json"), "partition": "natural"},
               {"name": "char-lstm", "args": {"hidden": 16, "layers": 1}}, n=3, updates=40, every=20)
    assert run.summary["status"] == "complete" and run.summary["updates"] == 40
    entries = 80 * 8 + 4 * 16 * (8 + 16) + 2 * 4 * 16 + 16 * 80 + 80     # embedding, LSTM, linear
    assert set(read_table(run.path, "updates")["entries"]) == {entries}
    part = json.loads((run.path / "manifest.json").read_text())["partition"]
    assert part["scheme"] == "natural" and part["users"] == [1, 1, 1]
    assert len(read_table(run.path, "evals")) == 2
