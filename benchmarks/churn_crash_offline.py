"""A crashed device's churn on every runtime: device 1 crashes at its 18th push (seed 1977), its trace
takes it offline while it is still crashed, its recovery comes while it is away, and it comes back
later. Prints device 1's rows of the events table and its updates after it came back.

    python -m benchmarks.churn_crash_offline sim|local|docker

Times are emulated seconds since the agents started: offline at 12 s, back at 20 s, recovery 12 s after
the crash (docker's agents take seconds to start, so the schedule is later than the local test's). The
output of the three runs is benchmarks/results/churn_crash_offline.txt.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pandas as pd

from edgebed.emulator.engine import Engine
from edgebed.scenario import parse_scenario


def main(runtime: str) -> None:
    out = Path(tempfile.mkdtemp(prefix="edgebed-crash-offline-"))
    trace = out / "trace.csv"
    trace.write_text("device,time_s,online\n1,0,1\n1,12,0\n1,20,1\n")
    sc = parse_scenario({
        "name": "crash-offline", "seed": 1977, "model": {"name": "mlp"},
        "algorithm": {"name": "adacomp", "lr": 0.05, "c": 0.01}, "eval": {"every": 100000, "test_samples": 100},
        "workers": {"n": 3, "classes": [{"name": "edge", "share": 1, "think_time": "100ms"}]},
        "failures": {"crash_probability": 0.002}, "stop": {"wall_time": "26s"},
        "dynamics": {"trace": {"path": str(trace)}, "availability": {"recover_after": "12s"}},
        "runtime": {"name": runtime, **({"docker": {"agents": "container"}} if runtime == "docker" else {})}})
    res = Engine(sc, out=out).run()
    events, updates = pd.read_csv(res.path / "events.csv"), pd.read_csv(res.path / "updates.csv")
    mine = events[(events.device == 1) & events.event.isin(["hello", "crash", "offline", "recover", "online"])]
    print(f"# {runtime}: status {res.summary['status']}, leftovers {res.summary.get('leftovers')}")
    print(mine[["wall_time", "event", "detail"]].to_string(index=False))
    back = mine[mine.event == "online"]["wall_time"]
    after = int((updates[updates.device == 1]["wall_time"] > back.iloc[0]).sum()) if len(back) else None
    print(f"device 1 updates after it came back: {after}\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sim")
