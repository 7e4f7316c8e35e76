"""The scenario's dataset section names the new partitions: validated, computed the same by every
runtime's call (Partition.for_spec), checked before a run, recorded in the manifest; the Welcome's
bytes unchanged while they are unused."""
from __future__ import annotations

import json

import numpy as np
import pytest

from edgebed.data import Partition, load_bundled, partition_problems, partition_summary
from edgebed.data.partitions import make_partition
from edgebed.emulator.welcome import welcome_config
from edgebed.scenario import ScenarioError, parse_scenario

pytestmark = pytest.mark.timeout(120)


def _sc(n=20, **dataset):
    return parse_scenario({"name": "part", "model": {"name": "mlp"}, "workers": {"n": n},
                           "dataset": {"source": "bundled", **dataset}, "stop": {"updates": 6},
                           "runtime": {"name": "sim"}})


def test_dirichlet_needs_alpha_and_own_samples_stay_with_iid_and_by_label():
    with pytest.raises(ScenarioError, match="partition: dirichlet needs `alpha:`"):
        _sc(partition="dirichlet")
    with pytest.raises(ScenarioError, match="samples_per_device works with partition iid or by-label, not quantity"):
        _sc(partition="quantity", samples_per_device=100)
    with pytest.raises(ScenarioError, match="dataset.partition"):
        _sc(partition="pathological")


def test_every_runtime_gets_the_partition_the_section_names():
    sc = _sc(partition="dirichlet", alpha=0.3, min_size=50)
    y = load_bundled(0.2, 0).train_y
    on_wire = welcome_config(sc, 0, "none", {}).dataset          # the agent's copy, as the Welcome carries it
    a, b = Partition.for_spec(y, 20, sc.dataset, 5), Partition.for_spec(y, 20, on_wire, 5)
    want, _ = make_partition("dirichlet", y, 20, 5, alpha=0.3, min_size=50)
    for d in range(20):
        assert np.array_equal(a[d], want[d]) and np.array_equal(b[d], want[d])
    assert min(len(s) for s in a) >= 50


def test_the_welcome_is_unchanged_until_a_new_partition_is_used():
    default = welcome_config(_sc(), 0, "none", {}).dataset
    assert not {"alpha", "min_size", "sizes", "sigma", "exponent"} & default.keys()
    skewed = welcome_config(_sc(partition="quantity", sizes="powerlaw", exponent=1.5), 0, "none", {}).dataset
    assert skewed["sizes"] == "powerlaw" and skewed["exponent"] == 1.5


def test_what_cant_be_partitioned_is_refused_before_the_run():
    (problem,) = partition_problems(_sc(partition="natural").dataset, 20)
    assert "needs a user / writer id per sample" in problem
    (problem,) = partition_problems(_sc(partition="quantity", min_size=500).dataset, 20)
    assert "20 devices × min_size 500 > 8000 samples" in problem
    assert partition_problems(_sc(partition="dirichlet", alpha=0.5).dataset, 20) == []


def test_the_summary_the_manifest_records():
    s = partition_summary(_sc(partition="by-label").dataset, 20, 0)
    assert sum(s["samples"]) == 8000 and s["scheme"] == "by-label"
    assert all(sum(1 for c in h if c) <= 3 for h in s["label_histogram"])    # two label shards (a seam: 3)
    d = partition_summary(_sc(partition="dirichlet", alpha=0.1).dataset, 20, 0)
    assert d["params"] == {"alpha": 0.1, "min_size": 1}
    assert partition_summary(_sc(samples_per_device=100).dataset, 20, 0) is None


@pytest.mark.slow
def test_a_sim_run_trains_on_a_dirichlet_partition_and_records_it(tmp_path):
    from edgebed.emulator.engine import Engine
    sc = _sc(n=8, partition="dirichlet", alpha=0.2)
    result = Engine(sc, out=tmp_path / "runs").run()
    path = result.path
    manifest = json.loads((path / "manifest.json").read_text())
    part = manifest["partition"]
    assert part["scheme"] == "dirichlet" and sum(part["samples"]) == 8000 and len(part["label_histogram"]) == 8
    y = load_bundled(0.2, 0).train_y
    want, _ = make_partition("dirichlet", y, 8, sc.seed, alpha=0.2)
    assert part["samples"] == [len(s) for s in want]
    assert result.summary["updates"] >= 6


def test_a_scenario_reads_an_imagefolder_with_a_held_out_test_split(tmp_path):
    from PIL import Image

    from edgebed.data import input_of, load_dataset
    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(20):
            Image.fromarray(rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)).save(tmp_path / cls / f"{i}.png")
    sc = parse_scenario({"name": "f", "workers": {"n": 4}, "stop": {"updates": 5}, "model": {"name": "mlp"},
                         "dataset": {"format": "imagefolder", "path": str(tmp_path), "test_fraction": 0.25}})
    assert sc.dataset.source == "path"                          # nothing is bundled in this format
    ds = load_dataset(sc.dataset)
    assert ds.train_x.shape == (30, 3, 5, 7) and ds.test_x.shape == (10, 3, 5, 7) and ds.num_classes == 2
    assert set(ds.test_y.tolist()) == {0, 1}                     # the folder is sorted by class; the test rows are not
    assert ds.train_x.dtype == np.float32 and abs(float(ds.train_x.mean())) < 0.05   # normalised by its own stats
    assert input_of(sc.dataset) == ((3, 5, 7), 2)
    summary = partition_summary(sc.dataset, 4, 0)
    assert sum(summary["samples"]) == 30 and all(len(h) == 2 for h in summary["label_histogram"])


def test_a_scenario_reads_a_python_factory_with_given_normalisation(tmp_path, monkeypatch):
    from edgebed.data import load_dataset
    (tmp_path / "scenario_factory_set.py").write_text(
        "import numpy as np\n"
        "def make(n=30):\n"
        "    y = np.arange(n) % 3\n"
        "    return {'x': np.full((n, 1, 4, 4), 0.5, np.float32), 'y': y}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sc = parse_scenario({"name": "f", "workers": {"n": 2}, "stop": {"updates": 5}, "model": {"name": "mlp"},
                         "dataset": {"format": "python", "options": {"factory": "scenario_factory_set:make", "args": {"n": 40}},
                                     "normalise": {"mean": [0.25], "std": [0.5]}}})
    ds = load_dataset(sc.dataset)
    assert len(ds.train_y) == 32 and len(ds.test_y) == 8 and ds.num_classes == 3
    np.testing.assert_allclose(ds.train_x, 0.5)                  # (0.5 - 0.25) / 0.5
    with pytest.raises(ScenarioError, match="format: python needs options.factory"):
        parse_scenario({"name": "f", "workers": {"n": 2}, "stop": {"updates": 5}, "dataset": {"format": "python"}})
    with pytest.raises(ScenarioError, match="format npz has nothing bundled"):
        parse_scenario({"name": "f", "workers": {"n": 2}, "stop": {"updates": 5},
                        "dataset": {"format": "npz", "source": "bundled"}})


@pytest.mark.parametrize("normalise", [None, {"mean": [0.5, 0.4], "std": [0.2, 0.3]}])
def test_an_agents_shard_is_the_whole_sets_rows_read_alone(tmp_path, normalise):
    """What an agent of the local / docker / spark runtimes loads (its rows only, formatted_shard) is
    bit for bit what the virtual clock and the evaluator index out of the whole set."""
    from edgebed.data import labels_and_users, load_dataset
    from edgebed.data.scenario_set import formatted_shard
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "s.npz", x=rng.integers(0, 256, (300, 2, 5, 5), dtype=np.uint8), y=np.arange(300) % 3)
    section = {"format": "npz", "path": str(tmp_path / "s.npz"), "partition": "dirichlet", "alpha": 0.5,
               "validation_samples": 20, **({"normalise": normalise} if normalise else {})}
    sc = parse_scenario({"name": "f", "workers": {"n": 5}, "stop": {"updates": 5}, "model": {"name": "mlp"},
                         "dataset": section})
    ds = load_dataset(sc.dataset)
    y, users = labels_and_users(sc.dataset)
    np.testing.assert_array_equal(y, ds.train_y)
    for rows in Partition.for_spec(y, 5, sc.dataset, 3, users):
        x_alone, y_alone = formatted_shard(sc.dataset, rows)
        assert x_alone.dtype == np.float32 and np.array_equal(x_alone, ds.train_x[rows])
        np.testing.assert_array_equal(y_alone, ds.train_y[rows])
