"""A ResNet-50-sized model (25.6 M parameters, 102 MB dense float32) pushes and pulls dense: the message
cap follows |Θ| (``wire.message_cap``) instead of a constant 64 MiB that dropped any push of more than
16.7 M entries (issue #38)."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import Scenario

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

ROOT = str(Path(__file__).resolve().parents[2])   # tests.sized_models is imported from the repository root
PARAMS = 25_592_938


@pytest.mark.parametrize("runtime", ["sim", "local"])
def test_a_resnet50_sized_model_pushes_and_pulls_dense(runtime, tmp_path):
    sc = Scenario.model_validate({
        "name": f"size-25m-{runtime}", "seed": 1,
        "model": {"name": "tests.sized_models:mlp_25m", "path": ROOT},
        "dataset": {"train_samples": 400},
        "algorithm": {"name": "asgd", "lr": 0.01, "batch_size": 10},
        "workers": {"n": 2}, "stop": {"updates": 6, "wall_time": "4min"},
        "eval": {"every": 6, "test_samples": 200}, "runtime": {"name": runtime}})
    run = Engine(sc, tmp_path / "runs").run()
    assert run.summary["status"] == "complete" and run.summary["updates"] == 6, run.summary
    updates = read_table(run.path, "updates")
    assert len(updates) == 6 and set(updates["entries"]) == {PARAMS}   # every push dense, none dropped
    # each push carried the whole Θ in float32, counted at the PS
    assert (updates["bytes_in"] >= 4 * PARAMS).all()
    evals = read_table(run.path, "evals")
    assert list(evals["update"]) == [6]
