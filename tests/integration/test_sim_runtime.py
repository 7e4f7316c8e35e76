"""The virtual-clock runtime: reproducible to the bit, batching-invariant, and staleness emerges."""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from edgebed.data import load_bundled
from edgebed.device_agent.batched import BatchedGradient, trainer_batches
from edgebed.device_agent.trainer import Trainer
from edgebed.emulator.engine import Engine
from edgebed.models import initial_theta
from edgebed.rundir import read_table
from edgebed.scenario import parse_scenario

# Links without a shaped uplink rate: a push's size (its header carries the float loss) then never
# moves an event, so batch sizes can't reorder anything and runs with max_batch 1 and 32 line up.
SCENARIO = {
    "name": "sim-test", "seed": 5,
    "dataset": {"train_samples": 2000},
    "model": {"name": "mlp"},
    "algorithm": {"name": "adacomp", "lr": 0.05, "batch_size": 10, "c": 0.01},
    "workers": {"n": 9, "classes": [
        {"name": "fast", "share": 0.34, "slowdown": 1, "think_time": "5ms"},
        {"name": "slowlink", "share": 0.33, "slowdown": 1,
         "uplink": {"delay": "20ms", "jitter": "5ms", "loss": "2%"}, "downlink": {"rate": "1gbit"}},
        {"name": "slowcpu", "share": 0.33, "slowdown": 20,
         "think_time": {"dist": "exponential", "mean": "5ms"}},
    ]},
    "failures": {"crash_probability": 0.006},
    "stop": {"updates": 300},
    "eval": {"every": 100, "test_samples": 500},
    "runtime": {"name": "sim"},
}
WALL = {"wall_time"}


def _run(tmp_path, name, **sim):
    data = copy.deepcopy(SCENARIO)
    data["runtime"]["sim"] = sim
    result = Engine(parse_scenario(data), out=tmp_path / name).run()
    tables = {t: read_table(result.path, t) for t in ("updates", "evals", "events")}
    return result, tables


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sim")
    return {"a": _run(tmp, "a", max_batch=32), "b": _run(tmp, "b", max_batch=32),
            "unbatched": _run(tmp, "unbatched", max_batch=1)}


def test_same_seed_gives_bit_identical_tables(runs):
    (ra, a), (rb, b) = runs["a"], runs["b"]
    assert ra.path != rb.path
    for table in ("updates", "evals", "events"):
        cols = [c for c in a[table].columns if c not in WALL]
        pd.testing.assert_frame_equal(a[table][cols], b[table][cols], check_exact=True)
    assert len(a["updates"]) == 300
    assert a["updates"]["virtual_time"].is_monotonic_increasing
    assert a["updates"]["virtual_time"].iloc[-1] > 0
    assert ra.summary["ingress_bytes"] == rb.summary["ingress_bytes"]


def test_batching_changes_neither_event_order_nor_results(runs):
    (_, a), (_, u) = runs["a"], runs["unbatched"]
    same = ["update", "virtual_time", "device", "speed_class", "staleness", "entries"]
    pd.testing.assert_frame_equal(a["updates"][same], u["updates"][same], check_exact=True)
    # vmap's kernels differ from the single call's in the last bits (2e-7 relative on the loss over
    # the first 100 updates here); SGD then compounds that (4e-6 at update 150, 3e-2 at 300), so the
    # losses are compared before it can, and the end by test accuracy.
    np.testing.assert_allclose(a["updates"]["loss"][:100], u["updates"]["loss"][:100], rtol=1e-5)
    np.testing.assert_allclose(a["evals"]["accuracy"], u["evals"]["accuracy"], atol=0.02)


def test_staleness_emerges_from_speeds_and_links(runs):
    ups = runs["a"][1]["updates"]
    share = ups["speed_class"].value_counts(normalize=True)
    assert share["fast"] > max(share["slowlink"], share["slowcpu"])
    stale = ups.groupby("speed_class")["staleness"].mean()
    # A slow uplink stretches the time between pull and applied push: more updates land in between.
    assert stale["slowlink"] > 2 * stale["fast"]
    assert ups["staleness"].max() > 0


def test_crash_draws_freeze_devices(runs):
    result, t = runs["a"]
    crashes = t["events"][t["events"]["event"] == "crash"]
    assert len(crashes) >= 1, "seed chosen so that at least one device crashes"
    assert result.summary["devices"]["crashed"] == len(crashes)
    ups = t["updates"]
    for _, c in crashes.iterrows():
        # the push that drew the crash is the device's last applied update
        assert ups[ups["device"] == c["device"]]["update"].max() == c["update"]


def test_accuracy_rises(runs):
    ev = runs["a"][1]["evals"].sort_values("update")
    assert list(ev["update"]) == [100, 200, 300]
    assert ev["accuracy"].iloc[-1] > ev["accuracy"].iloc[0]
    assert ev["accuracy"].iloc[-1] > 0.6
    assert ev["virtual_time"].is_monotonic_increasing


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_batched_gradients_equal_unbatched(model):
    ds = load_bundled(0.2, 0)
    theta, _ = initial_theta(model, 0)
    rng = np.random.default_rng(0)
    trainers = [Trainer(model, ds.train_x[i * 50:(i + 1) * 50], ds.train_y[i * 50:(i + 1) * 50],
                        10, 0, i) for i in range(4)]
    reference = copy.deepcopy(trainers)
    thetas = [theta + rng.normal(0, 0.01, theta.size).astype(np.float32) for _ in range(4)]
    grads, losses = BatchedGradient(model, 0)(thetas, *trainer_batches(trainers))
    for i, tr in enumerate(reference):
        g, loss = tr.gradient(thetas[i])
        np.testing.assert_allclose(grads[i], g, rtol=1e-4, atol=1e-6)
        assert losses[i] == pytest.approx(loss, rel=1e-5)


def test_summary_fidelity_realized_rates_match_configured_speeds(tmp_path):
    """No think time, unshaped links, no crashes: update rates follow the compute speeds (5:1), and the
    summary's fidelity section says so next to the configured ratio."""
    data = {"name": "sim-fidelity", "seed": 2, "dataset": {"train_samples": 1000}, "model": {"name": "mlp"},
            "algorithm": {"name": "asgd", "lr": 0.05},
            "workers": {"n": 6, "classes": [{"name": "fast", "share": 0.5},
                                            {"name": "slow", "share": 0.5, "slowdown": 5}]},
            "stop": {"updates": 600}, "eval": {"every": 600, "test_samples": 200}, "runtime": {"name": "sim"}}
    s = Engine(parse_scenario(data), out=tmp_path).run().summary
    rows = {r["class"]: r for r in s["fidelity"]["classes"]}
    assert rows["fast"]["configured_speed_ratio"] == 5 and rows["slow"]["configured_speed_ratio"] == 1
    assert rows["fast"]["realized_rate_ratio"] == pytest.approx(5, rel=0.1)
    assert rows["fast"]["updates"] + rows["slow"]["updates"] == 600
    # the duration is virtual: 100 pushes per fast device at ~0.4 ms of compute each
    assert rows["fast"]["updates_per_device_per_s"] == pytest.approx(1 / 0.4e-3, rel=0.15)
    assert "uplink" not in s["fidelity"]          # no kernel counters on the virtual clock


AVERAGING = [{"name": "model-averaging", "local_steps": 5},
             {"name": "dynamic-averaging", "local_steps": 5, "delta": 0.5},
             {"name": "easgd", "moving_rate": 0.2, "loss_threshold": 3.0}]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", AVERAGING, ids=[a["name"] for a in AVERAGING])
def test_averaging_rules_run_on_the_virtual_clock_bit_identically(algorithm, tmp_path):
    data = copy.deepcopy(SCENARIO)
    data.update(algorithm={"lr": 0.05, "batch_size": 10, **algorithm}, stop={"updates": 120},
                eval={"every": 40, "test_samples": 300})
    runs = []
    for name in ("a", "b"):
        result = Engine(parse_scenario(copy.deepcopy(data)), out=tmp_path / name).run()
        runs.append((result, {t: read_table(result.path, t) for t in ("updates", "evals", "events")}))
    (ra, a), (rb, b) = runs
    for table in ("updates", "evals", "events"):
        cols = [c for c in a[table].columns if c not in WALL]
        pd.testing.assert_frame_equal(a[table][cols], b[table][cols], check_exact=True)
    assert ra.summary["status"] == "complete" and ra.summary["updates"] == 120
    assert ra.summary["rule"] == rb.summary["rule"]
    if algorithm["name"] != "easgd":   # rounds closed: the barrier works with crashes on a virtual clock
        assert ra.summary["rule"]["rounds"] > 5
    ev = a["evals"].sort_values("update")
    assert ev["accuracy"].iloc[-1] > ev["accuracy"].iloc[0]
