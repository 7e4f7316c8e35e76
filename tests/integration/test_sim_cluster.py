"""The virtual clock as a datacenter (scenarios/datacenter-averaging.yaml): C per step, S per
synchronisation, a Spark stage's barrier — so emulated time is the Spark papers' speed-up model."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import parse_scenario

C, TAU, K = 2.0, 4, 3
CLUSTER = {
    "name": "cluster-test", "seed": 3, "dataset": {"train_samples": 2000}, "model": {"name": "mlp"},
    "algorithm": {"name": "model-averaging", "lr": 0.05, "batch_size": 10, "local_steps": TAU},
    "workers": {"n": K}, "failures": {"crash_probability": 0},
    "stop": {"updates": 10 * K}, "eval": {"every": K, "test_samples": 200},
    "runtime": {"name": "sim", "sim": {"step_time": C, "step_jitter": 0.0}},
}


def _evals(tmp_path, name, **sim):
    data = copy.deepcopy(CLUSTER)
    data["runtime"]["sim"].update(sim)
    result = Engine(parse_scenario(data), out=tmp_path / name).run()
    assert result.summary["status"] == "complete"
    return read_table(result.path, "evals").sort_values("update").reset_index(drop=True), result.summary


@pytest.mark.timeout(120)
def test_a_barrier_round_costs_tau_steps_plus_one_sync_time_and_s_never_changes_the_training(tmp_path):
    s = 20.0
    quiet, q = _evals(tmp_path, "s0")
    slow, w = _evals(tmp_path, "s20", sync_time=s)
    rounds = (slow["update"] // K).to_numpy()       # one eval per round, at the round's last push
    assert list(rounds) == list(range(1, 11)) and w["rule"]["rounds"] == q["rule"]["rounds"] == 10
    # no jitter, unshaped links: round r ends at r·τ·C, plus r·S when each round's broadcast takes S
    np.testing.assert_allclose(quiet["virtual_time"], rounds * TAU * C, rtol=1e-9)
    np.testing.assert_allclose(slow["virtual_time"], rounds * (TAU * C + s), rtol=1e-9)
    # the trajectory is the barrier's, not the clock's: the same models, bit for bit
    assert list(slow["accuracy"]) == list(quiet["accuracy"]) and list(slow["loss"]) == list(quiet["loss"])


@pytest.mark.timeout(120)
def test_the_round_waits_for_the_slowest_worker(tmp_path):
    """A Spark stage ends when its slowest task does: with step jitter every round lasts the
    longest of the K workers' τ steps, so rounds take longer than τ·C on average, never less than
    the fastest could."""
    evals, _ = _evals(tmp_path, "jitter", step_jitter=0.2)
    per_round = np.diff(np.concatenate([[0.0], evals["virtual_time"].to_numpy()]))
    assert per_round.min() >= TAU * C * 0.8 and per_round.max() <= TAU * C * 1.2
    assert per_round.mean() > TAU * C                # the max of K sums, not their mean
