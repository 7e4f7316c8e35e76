"""eval.dense: evaluations every dense.every updates near a target accuracy, on the virtual clock —
deterministic, and evaluating more often changes nothing else in the run."""
from __future__ import annotations

import copy

import pandas as pd
import pytest

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import parse_scenario

SCENARIO = {
    "name": "dense-eval", "seed": 3,
    "dataset": {"train_samples": 2000},
    "model": {"name": "mlp"},
    "algorithm": {"name": "adacomp", "lr": 0.05, "batch_size": 10, "c": 0.01},
    "workers": {"n": 6, "classes": [
        {"name": "fast", "share": 0.5, "think_time": "5ms"},
        {"name": "slow", "share": 0.5, "slowdown": 4, "think_time": "5ms"}]},
    "stop": {"updates": 400},
    "eval": {"every": 100, "test_samples": 500},
    "runtime": {"name": "sim"},
}


def _run(tmp_path, name, dense=None):
    data = copy.deepcopy(SCENARIO)
    if dense:
        data["eval"]["dense"] = dense
    res = Engine(parse_scenario(data), out=tmp_path / name).run()
    assert res.summary["status"] == "complete", res.summary
    return read_table(res.path, "updates"), read_table(res.path, "evals")


@pytest.mark.timeout(120)
def test_dense_evaluation_near_a_target_only(tmp_path):
    ups, evals = _run(tmp_path, "coarse")
    assert list(evals["update"]) == [100, 200, 300, 400]
    # A target at the accuracy reached at update 200: dense from there while within 2 points of it.
    target = float(evals.set_index("update").loc[200, "accuracy"])
    dense = {"near": [target], "within": 0.02, "every": 25}
    ups_d, evals_d = _run(tmp_path, "dense", dense)

    cols = [c for c in ups.columns if c != "wall_time"]
    pd.testing.assert_frame_equal(ups[cols], ups_d[cols], check_exact=True)   # training untouched
    acc = evals_d.set_index("update")["accuracy"]
    for u in (100, 200, 300, 400):   # the coarse grid is kept, with the same accuracies
        assert acc[u] == evals.set_index("update").loc[u, "accuracy"]
    assert 225 in acc.index and len(acc) > 4
    # The rule: the next evaluation comes 25 updates after a near one, at the next multiple of 100
    # after one that is not.
    updates = list(acc.index)
    for prev, nxt in zip(updates, updates[1:]):
        near = abs(acc[prev] - target) <= 0.02
        assert nxt == (prev + 25 if near else (prev // 100 + 1) * 100), (prev, nxt, acc[prev])


def test_dense_every_must_divide_eval_every():
    data = copy.deepcopy(SCENARIO)
    data["eval"]["dense"] = {"near": [0.9], "every": 30}
    with pytest.raises(ValueError, match=r"eval.dense.every \(30\) must divide eval.every \(100\)"):
        parse_scenario(data)
