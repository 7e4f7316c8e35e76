"""Live curves: a run with output.tensorboard writes event files whose scalars equal the run's tables."""
from __future__ import annotations

import numpy as np
import pytest

from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import parse_scenario
from tests.capabilities import require

SCENARIO = {
    "name": "tb-test", "seed": 2, "dataset": {"train_samples": 1000}, "model": {"name": "mlp"},
    "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.05},
    "workers": {"n": 6, "classes": [{"name": "fast", "share": 0.5},
                                     {"name": "slow", "share": 0.5, "slowdown": 3}]},
    "failures": {"crash_probability": 0.004},
    "stop": {"updates": 600}, "eval": {"every": 100, "test_samples": 200}, "runtime": {"name": "sim"},
    "output": {"tensorboard": True},
}


def scalars(acc, tag):
    return [(e.step, e.value) for e in acc.Scalars(tag)]


@pytest.mark.timeout(180)
def test_tensorboard_scalars_equal_the_runs_tables(tmp_path):
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        require(False, "tensorboard", "pip install 'edgebed[tensorboard]'")
    res = Engine(parse_scenario(SCENARIO), out=tmp_path).run()
    assert res.summary["status"] == "complete", res.summary
    acc = EventAccumulator(str(res.path / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"eval/accuracy", "eval/loss", "ps/ingress_MB", "staleness/fast", "staleness/slow",
            "update_rate/fast", "update_rate/slow", "live_devices/fast", "live_devices/slow",
            "live_devices/all"} <= tags, tags

    evals = read_table(res.path, "evals").sort_values("update")
    got = scalars(acc, "eval/accuracy")
    assert [s for s, _ in got] == evals["update"].tolist()
    assert [v for _, v in got] == pytest.approx(evals["accuracy"].tolist(), rel=1e-6)   # float32 in the file
    assert [v for _, v in scalars(acc, "ps/ingress_MB")] == pytest.approx((evals["ingress_bytes"] / 1e6).tolist(), rel=1e-6)

    # staleness: per flushed batch (updates up to the step), the class's mean τ — as the updates table says
    ups = read_table(res.path, "updates").sort_values("update")
    for k in ("fast", "slow"):
        prev = 0
        for step, value in scalars(acc, f"staleness/{k}"):
            batch = ups[(ups["update"] > prev) & (ups["update"] <= step)]
            prev = step
            assert value == pytest.approx(batch.loc[batch["speed_class"] == k, "staleness"].mean(), rel=1e-5)
    # the rates: all applied updates over the run's emulated time, summed over batches
    steps = scalars(acc, "update_rate/all")
    assert steps[-1][0] == ups["update"].max()

    # live devices: all 6 said hello; each crash removed one, as the events table records
    live = [v for _, v in scalars(acc, "live_devices/all")]
    crashed = res.summary["devices"]["crashed"]
    assert max(live) == 6 and live[-1] == 6 - crashed
    assert crashed >= 1, "the scenario should crash a device (crash_probability 0.004 × 600 pushes)"
    assert np.all(np.array([v for _, v in scalars(acc, "live_devices/fast")]) <= 3)


def test_a_tensorboard_run_is_the_same_setup_as_one_without():
    """output.* is output only: a report groups the two as seeds of one setup, the scenario dump of a
    run without it stays as it was."""
    from edgebed.analysis.groups import key
    on = parse_scenario(SCENARIO).to_dict()
    off = parse_scenario({k: v for k, v in SCENARIO.items() if k != "output"}).to_dict()
    assert "output" not in off and on["output"] == {"tensorboard": True}
    assert key(on) == key(off)
