"""A Dirichlet partition on the local runtime: real agent processes compute their shards from the
Welcome's copy of the dataset section (Partition.for_spec), and the manifest records the split."""
import pytest

from edgebed.data import load_bundled
from edgebed.data.partitions import make_partition
from edgebed.emulator.engine import Engine
from edgebed.rundir import read_json
from edgebed.scenario import parse_scenario

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_local_agents_train_on_a_dirichlet_partition(tmp_path):
    sc = parse_scenario({"name": "dirichlet-local", "seed": 4, "model": {"name": "mlp"},
                         "dataset": {"partition": "dirichlet", "alpha": 0.3, "min_size": 100},
                         "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
                         "workers": {"n": 4}, "stop": {"updates": 60, "wall_time": "2min"},
                         "eval": {"every": 60, "test_samples": 500}})
    run = Engine(sc, tmp_path / "runs").run()
    assert run.summary["status"] == "complete" and run.summary["devices"]["said_hello"] == 4
    part = read_json(run.path, "manifest.json")["partition"]
    want, _ = make_partition("dirichlet", load_bundled(0.2, 0).train_y, 4, 4, alpha=0.3, min_size=100)
    assert part["samples"] == [len(s) for s in want] and min(part["samples"]) >= 100
    # strongly skewed: some device holds under half of the classes' share a uniform split would give
    assert min(min(h) for h in part["label_histogram"]) < 0.5 * 8000 / 4 / 10
