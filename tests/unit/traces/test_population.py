"""The population generator: seeded, heterogeneous as documented, readable as a trace, and usable
from the command line."""
from __future__ import annotations

import numpy as np

from edgebed.traces import read_trace
from edgebed.traces.__main__ import main
from edgebed.traces.population import Population, generate


def test_same_seed_same_population_and_the_documented_medians():
    a, b = generate(400, seed=3), generate(400, seed=3)
    assert a == b and a != generate(400, seed=4)
    slow = np.array([p[0].slowdown for p in a.values()])
    up = np.array([p[0].uplink_kbit_s for p in a.values()])
    down = np.array([p[0].downlink_kbit_s for p in a.values()])
    assert slow.min() >= 1 and 1.6 < np.median(slow) < 2.5 and slow.max() / slow.min() > 10
    assert 3500 < np.median(up) < 7000 and 3 < np.median(down / up) < 5.5


def test_availability_periods_alternate_up_to_the_horizon():
    trace = generate(50, seed=1, horizon_s=7200, params=Population(online_mean_s=600, offline_mean_s=300))
    for points in trace.values():
        states = [p.online for p in points]
        assert states[0] is True and all(x != y for x, y in zip(states, states[1:]))
        assert all(p.time_s < 7200 for p in points)
    up = [sum(1 for p in pts[1:]) for pts in trace.values()]
    assert 10 < np.mean(up) < 40   # ≈ 7200 / 450 changes each


def test_command_line_writes_a_trace_the_runtime_reads(tmp_path, capsys):
    out = tmp_path / "pop.csv"
    assert main(["generate", "--n", "5", "--seed", "2", "--online-mean", "10min", "--horizon", "1h",
                 "-o", str(out)]) == 0
    assert sorted(read_trace(out, n_devices=5)) == [0, 1, 2, 3, 4]
    assert main(["fedscale", "-o", str(tmp_path / "x.csv")]) == 2
    assert "capacity pickle, a behaviour pickle or both" in capsys.readouterr().err
