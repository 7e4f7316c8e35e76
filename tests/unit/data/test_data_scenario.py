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
