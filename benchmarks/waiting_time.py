"""Random waiting time (``timing.wait``): staleness and update order of identical devices on the sim.

    .venv/bin/python benchmarks/waiting_time.py

Eight identical devices (MLP, ASGD, no think time, the sim's default ±10 % step jitter), 1,000
updates, without a waiting time and with exponential waits of mean 1 ms and 4 ms (a cycle is ~0.4 ms of
compute plus the transfers: none here). Writes τ's mean, standard deviation and histogram and the share
of 8-update windows in which every device pushed once (round-robin order) to
``benchmarks/results/waiting_time.json``. Deterministic: the sim gives the same numbers on any host.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BASE = {"name": "waiting", "seed": 5, "dataset": {"name": "mnist", "source": "bundled", "train_samples": 800},
        "model": {"name": "mlp"}, "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
        "workers": {"n": 8}, "stop": {"updates": 1000}, "eval": {"every": 100000}, "runtime": {"name": "sim"}}
WAITS = {"off": None, "exponential 1ms": "1ms", "exponential 4ms": "4ms"}
SKIP = 50   # the first updates, before the devices' order settles


def round_robin_share(devices: np.ndarray, n: int) -> float:
    return float(np.mean([len(set(devices[i:i + n])) == n for i in range(len(devices) - n)]))


def main() -> int:
    from edgebed.emulator.engine import Engine
    from edgebed.rundir import read_table
    from edgebed.scenario import parse_scenario
    out, runs = {}, Path(tempfile.mkdtemp(prefix="edgebed-wait-"))
    for name, mean in WAITS.items():
        data = dict(BASE, timing={"wait": {"dist": "exponential", "mean": mean}}) if mean else BASE
        res = Engine(parse_scenario(data), out=runs).run()
        u = read_table(res.path, "updates").sort_values("update").iloc[SKIP:]
        tau = u["staleness"].to_numpy()
        out[name] = {"staleness_mean": round(float(tau.mean()), 3), "staleness_std": round(float(tau.std()), 3),
                     "staleness_histogram": np.bincount(tau).tolist(),
                     "round_robin_windows": round(round_robin_share(u["device"].to_numpy(), 8), 4),
                     "verdict": res.summary["fidelity"]["verdict"]["summary"]}
        print(name, json.dumps(out[name]), flush=True)
    path = ROOT / "benchmarks" / "results" / "waiting_time.json"
    path.write_text(json.dumps({"scenario": BASE, "skipped_first_updates": SKIP, "results": out}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
