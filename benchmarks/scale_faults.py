"""Why dense ASGD slows down with 10,000 devices on the virtual clock: page faults per update.

    python -m benchmarks.scale_faults [--n 200 10000]   → benchmarks/results/scale-asgd-faults.json

Runs bench_scale's MLP/ASGD point (3,000 updates) in this process for each n and counts the minor
page faults (``getrusage``) between the first and the last applied update. Every ASGD device keeps
its dense gradient (|Θ| floats) from its pull to its push; with thousands alive at once each new one
comes from fresh memory, which the kernel faults in. The cProfile tables beside the result
(``scale-profile-mlp-asgd-n*.txt``) show where that time lands: ``torch.cat``, which writes the
flattened gradient.
"""
from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from benchmarks.bench_scale import scenario

OUT = Path(__file__).resolve().parent / "results" / "scale-asgd-faults.json"


def faults_per_update(n: int, updates: int = 3000) -> dict:
    from edgebed import rundir
    from edgebed.emulator.engine import Engine
    from edgebed.scenario import parse_scenario
    marks: list[tuple[int, float]] = []
    append = rundir.RunWriter.append

    def counted(self, table, row):
        if table == "updates":
            marks.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()))
        return append(self, table, row)
    rundir.RunWriter.append = counted
    try:
        with tempfile.TemporaryDirectory() as tmp:
            Engine(parse_scenario(scenario("mlp", "asgd", n, updates)), out=tmp).run()
    finally:
        rundir.RunWriter.append = append
    (f0, c0), (f1, c1) = marks[0], marks[-1]
    k = len(marks) - 1
    return {"n": n, "updates": k + 1, "minor_faults_per_update": round((f1 - f0) / k, 1),
            "cpu_ms_per_update": round((c1 - c0) / k * 1e3, 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[200, 10_000])
    args = ap.parse_args(argv)
    points = []
    for n in args.n:
        points.append(faults_per_update(n))
        print(json.dumps(points[-1]), flush=True)
    OUT.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "model": "mlp", "rule": "asgd",
                               "points": points}, indent=2) + "\n")
    print(f"written {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
