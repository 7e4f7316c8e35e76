"""The Spark papers' algorithms end to end on the local runtime: real agents, sockets, local SGD."""
import pytest

from edgebed.emulator.engine import Engine
from edgebed.models import initial_theta
from edgebed.rundir import read_json, read_table
from edgebed.scenario import parse_scenario

DENSE = initial_theta("mlp", 0)[0].size * 4   # bytes of one dense float32 delta of the mlp

BASE = {
    "seed": 5, "dataset": {"test_fraction": 0.1}, "model": {"name": "mlp"},
    "workers": {"n": 4}, "stop": {"updates": 240, "wall_time": "90s"},
    "eval": {"every": 60, "test_samples": 1000},
}
ALGORITHMS = {
    # 6 devices, one of them crashes: the barrier must close its rounds without it
    "model-averaging": ({"name": "model-averaging", "lr": 0.05, "local_steps": 10},
                        {"workers": {"n": 6}, "failures": {"crash_probability": 0.01}}),
    "dynamic-averaging": ({"name": "dynamic-averaging", "lr": 0.05, "local_steps": 10, "delta": 1.0}, {}),
    "easgd": ({"name": "easgd", "lr": 0.05, "moving_rate": 0.2, "loss_threshold": 5.0}, {}),
}


@pytest.fixture(scope="module", params=sorted(ALGORITHMS))
def run(request, tmp_path_factory):
    algorithm, extra = ALGORITHMS[request.param]
    sc = parse_scenario({**BASE, "name": f"e2e-{request.param}", "algorithm": algorithm, **extra})
    return request.param, Engine(sc, tmp_path_factory.mktemp("runs")).run()


def test_accuracy_rises_and_ingress_is_counted(run):
    name, res = run
    s = res.summary
    assert s["status"] == "complete" and s["updates"] == 240, s["reason"]
    evals = read_table(res.path, "evals").sort_values("update")
    assert evals["accuracy"].iloc[-1] > evals["accuracy"].iloc[0]
    assert evals["accuracy"].iloc[-1] > 0.85
    traffic = read_json(res.path, "traffic.json")
    assert traffic["ingress_bytes"] == s["ingress_bytes"] == sum(k["in_bytes"] for k in traffic["by_kind"].values())
    updates = read_table(res.path, "updates")
    dense = updates[updates.entries > 0]
    assert (dense["entries"] == DENSE // 4).all()              # deltas are dense models
    assert dense["bytes_in"].between(DENSE, DENSE + 200).all()
    assert evals["ingress_bytes"].is_monotonic_increasing


def test_each_algorithm_communicates_as_designed(run):
    name, res = run
    s, rule = res.summary, res.summary["rule"]
    updates = read_table(res.path, "updates")
    if name == "model-averaging":
        # every push is a delta; a round per live worker's delta, and the crash didn't stall the rounds
        assert (updates["entries"] > 0).all()
        crashes = read_table(res.path, "events").query("event == 'crash'")
        assert s["devices"]["crashed"] == len(crashes) >= 1
        assert updates["update"].max() > crashes["update"].max()      # rounds went on after the crash
        assert rule["rounds"] >= 240 // 6
    elif name == "dynamic-averaging":
        # quiet reports are header-only pushes; a sync uploads one dense delta per device
        quiet = updates[updates.entries == 0]
        assert len(quiet) > 0 and quiet["bytes_in"].max() < 200
        assert 1 <= rule["syncs"] < rule["rounds"]
        assert len(updates[updates.entries > 0]) <= 4 * rule["syncs"] + 4    # + the last open round
        assert s["push_bytes"] < 240 * DENSE / 2                              # vs periodic averaging
    else:
        assert rule["exchanges"] >= 240 and (updates["entries"] > 0).all()
