"""A user's model module and data set from outside the repository train on the docker runtime with
the agents in their containers: both directories are mounted read-only at their host paths."""
import sys

import pytest

from edgebed.rundir import read_table
from edgebed.scenario import parse_scenario
from tests.capabilities import require_docker, require_root
from tests.integration.test_data_formats_run import LINEAR, write_learnable_cifar10

pytestmark = [pytest.mark.docker, pytest.mark.root, pytest.mark.slow, pytest.mark.timeout(290)]


def test_a_user_model_and_cifar_format_set_train_in_containers(tmp_path, monkeypatch):
    require_docker()
    require_root()
    from edgebed.emulator.engine import Engine
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    (tmp_path / "user" / "unets").mkdir(parents=True)
    (tmp_path / "user" / "unets" / "__init__.py").write_text("")
    (tmp_path / "user" / "unets" / "lin.py").write_text(LINEAR)
    root = write_learnable_cifar10(tmp_path / "c10")
    sc = parse_scenario({"name": "docker-user", "seed": 1, "dataset": {"format": "cifar10", "path": str(root)},
                         "model": {"name": "unets.lin:linear", "path": str(tmp_path / "user")},
                         "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
                         # a 20 ms think time: the 600 updates last ≥ 6 s, so the second container's
                         # agent says hello before the first has run them all alone (seen in CI)
                         "workers": {"n": 2, "classes": [{"name": "d", "share": 1, "think_time": "20ms"}]},
                         "stop": {"updates": 600, "wall_time": "200s"}, "eval": {"every": 300},
                         "runtime": {"name": "docker", "docker": {"agents": "container"}}})
    try:
        run = Engine(sc, out=tmp_path / "runs").run()
    finally:
        for name in [m for m in sys.modules if m.startswith("unets")]:
            del sys.modules[name]
    assert run.summary["status"] == "complete" and run.summary["updates"] == 600, run.summary
    assert run.summary["devices"]["said_hello"] == 2
    assert set(read_table(run.path, "updates")["entries"]) == {3072 * 10 + 10}
    assert read_table(run.path, "evals")["accuracy"].iloc[-1] > 0.5      # chance 0.1
