"""A paper-scale virtual-clock run's cost under ``portable``, this checkout against another: updates per
CPU second of scenarios/paper-fig3-adacomp.yaml (n = 200, AdaComp c = 0.01, the paper CNN, one gradient
at a time on one thread), stopped after ``--updates`` updates.

Each round runs one fresh process per checkout (``--before TREE``: its directory first on the path, this
virtual environment), alternating which goes first; CPU seconds are the process's own
(``time.process_time``) from the engine's start to its end, so other load on the host inflates them less
than wall time. Results: ``benchmarks/results/numerics-sim.json``.

    .venv/bin/python -m benchmarks.bench_numerics_sim --before /tmp/old-checkout [--rounds 2] [--updates 3000]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from edgebed import numerics

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "numerics-sim.json"
CHILD = """
import json, sys, tempfile, time
from pathlib import Path
import yaml
from edgebed.emulator.engine import Engine
from edgebed.scenario import parse_scenario
sc = yaml.safe_load(Path(sys.argv[1]).read_text())
sc["stop"] = {"updates": int(sys.argv[2])}
sc["numerics"] = "portable"
with tempfile.TemporaryDirectory() as tmp:
    t0 = time.process_time()
    result = Engine(parse_scenario(sc), out=Path(tmp)).run()
    cpu = time.process_time() - t0
print(json.dumps({"cpu_s": cpu, "updates": result.summary["updates"], "numerics": result.summary.get("numerics")}))
"""


def one(tree: Path, updates: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in numerics.PINS and k != numerics.ENV}
    env["PYTHONPATH"] = str(tree)
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "scenarios" / "paper-fig3-adacomp.yaml"),
                          str(updates)], env=env, cwd=tree, check=True, capture_output=True, text=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["updates_per_cpu_s"] = got["updates"] / got["cpu_s"]
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="the other checkout (the code before a change)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--updates", type=int, default=3000)
    ap.add_argument("--note", default="")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    trees = {"after": ROOT, "before": args.before.resolve()}
    rounds = []
    for r in range(args.rounds):
        order = ("after", "before") if r % 2 == 0 else ("before", "after")
        got = {name: one(trees[name], args.updates) for name in order}
        rounds.append({f"{n}_updates_per_cpu_s": round(got[n]["updates_per_cpu_s"], 2) for n in order})
        print(f"round {r + 1}: {rounds[-1]}", file=sys.stderr)
    summary = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    summary["speedup"] = round(summary["after_updates_per_cpu_s"] / summary["before_updates_per_cpu_s"], 3)
    result = {"what": __doc__.splitlines()[0], "date": time.strftime("%Y-%m-%d"), "updates": args.updates,
              "note": args.note, "before": str(args.before), "cpu": numerics._cpu_model(), "cores": os.cpu_count(),
              "load_average_at_end": [round(v, 2) for v in os.getloadavg()], "summary": summary, "rounds": rounds}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
