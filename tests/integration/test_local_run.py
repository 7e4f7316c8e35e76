"""End to end on the local runtime: real agent processes, real ZeroMQ sockets, real training."""
import subprocess
import sys

import pytest

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_json, read_table
from edgebed.scenario import parse_scenario

SMALL = {
    "name": "e2e", "seed": 3,
    "dataset": {"test_fraction": 0.1},
    "model": {"name": "cnn"},
    "algorithm": {"name": "adacomp", "lr": 0.05, "batch_size": 10, "c": 0.01},
    "workers": {"n": 8, "classes": [
        {"name": "fast", "share": 0.5, "uplink": {"rate": "20mbit", "delay": "2ms"}},
        {"name": "slow", "share": 0.5, "slowdown": 3, "think_time": "5ms", "uplink": {"rate": "5mbit"}}]},
    "stop": {"updates": 800, "wall_time": "4min"},
    "eval": {"every": 200, "test_samples": 1000},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    sc = parse_scenario(SMALL)
    return Engine(sc, tmp_path_factory.mktemp("runs")).run()


def test_run_completes_with_eight_real_agents_and_accuracy_rises(run):
    s = run.summary
    assert s["status"] == "complete" and s["updates"] == 800
    assert s["devices"]["said_hello"] == 8
    evals = read_table(run.path, "evals").sort_values("update")
    assert list(evals["update"]) == [200, 400, 600, 800]
    assert evals["accuracy"].iloc[-1] > evals["accuracy"].iloc[0]
    # Learning, not a number: the same scenario on the virtual clock ends at 0.887-0.949 over seeds
    # 1-6 and reads 0.787-0.866 at update 400 (benchmarks/results/e2e_accuracy_spread.json); a loaded
    # 2-core CI host ended one local run at 0.799 (more staleness), and chance is 0.10. 0.6 separates
    # "trains" from "broken" without failing on host load.
    assert evals["accuracy"].iloc[-1] > 0.6


def test_ingress_is_the_sum_of_received_message_bytes(run):
    updates = read_table(run.path, "updates")
    traffic = read_json(run.path, "traffic.json")
    assert len(updates) == 800 and list(updates["update"]) == list(range(1, 801))
    # Pushes that reach the PS after the 800th update are counted as ingress (they crossed the
    # link) but not applied: at most one per device, each the size of an AdaComp push.
    late = traffic["by_kind"]["push"]["in_msgs"] - 800
    assert 0 <= late <= 8
    assert 2122 * 8 * late <= traffic["push_bytes"] - updates["bytes_in"].sum() <= (2122 * 8 + 200) * late
    assert traffic["ingress_bytes"] == sum(k["in_bytes"] for k in traffic["by_kind"].values())
    assert traffic["ingress_bytes"] == run.summary["ingress_bytes"]
    # AdaComp at c = 0.01 over the 211,690-parameter CNN: 2,122 entries of 8 bytes + a small header.
    assert set(updates["entries"]) == {2122}
    assert updates["bytes_in"].between(2122 * 8, 2122 * 8 + 200).all()
    evals = read_table(run.path, "evals")
    assert evals["ingress_bytes"].is_monotonic_increasing


def test_run_directory_is_complete_and_readable(run):
    for name in ("scenario.yaml", "manifest.json", "summary.json", "traffic.json",
                 "updates.csv", "evals.csv", "events.csv"):
        assert (run.path / name).exists(), name
    manifest = read_json(run.path, "manifest.json")
    assert manifest["applied"]["link_rate"] == "app" and manifest["host"]["cores"] >= 1
    updates = read_table(run.path, "updates")
    fast = updates[updates.speed_class == "fast"]
    slow = updates[updates.speed_class == "slow"]
    assert len(fast) > len(slow)   # slowdown 3 + think time: the slow class pushes less
    assert updates["sigma_max"].max() >= updates["sigma_mean"].max() > 0


@pytest.mark.slow
def test_crashed_agents_stop_contributing(tmp_path):
    sc = parse_scenario({**SMALL, "model": {"name": "mlp"}, "failures": {"crash_probability": 0.02},
                         "stop": {"updates": 600, "wall_time": "3min"}, "eval": {"every": 300}})
    res = Engine(sc, tmp_path).run()
    events = read_table(res.path, "events")
    updates = read_table(res.path, "updates")
    crashes = events[events.event == "crash"]
    assert len(crashes) >= 1 and res.summary["devices"]["crashed"] == len(crashes)
    for _, c in crashes.iterrows():
        mine = updates[updates.device == c["device"]]
        assert mine["update"].max() == c["update"]   # its crash push was its last applied update
    assert res.summary["status"] == "complete"


def test_cli_validate_and_bad_scenario_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: b\nworkers: {n: 2}\nstop: {updates: 1}\nalgorithm: {name: asgd, lr: fast}\n")
    out = subprocess.run([sys.executable, "-m", "edgebed.cli", "validate", str(bad)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "bad.yaml: algorithm.lr" in out.stderr
    out = subprocess.run([sys.executable, "-m", "edgebed.cli", "run", str(bad), "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and not list(tmp_path.glob("b-*"))   # refused before anything started
