"""The scale benchmark's MLP/ASGD points in two checkouts, alternating: this tree against a baseline.

    python -m benchmarks.scale_ab --baseline DIR [--n 200 10000] [--updates 10000] [--rounds 2]
                                  [--out benchmarks/results/scale-mlp-asgd-buffers.json]

``DIR``: another checkout of edgebed with its compiled extensions built (``python setup.py build_ext
--inplace``), e.g. ``git archive`` of the commit before a change. Each round runs every n once in each
tree, alternating (baseline first), each point in its own niced subprocess exactly as
``benchmarks.bench_scale`` runs it (``--point``, cwd = the tree, so that tree's ``edgebed`` is
imported), so a change of the host's load hits both sides. Per round and tree: the rate at the
largest n over the rate at the smallest, per CPU second (the scale grid's goal: ≥ 0.8) and per wall
second (page faults: ``benchmarks/scale_faults.py``). The host's CPU model, and the load average at
each point's start and end, are recorded.
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

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "scale-mlp-asgd-buffers.json"


def _host() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown")
    return {"cpu_model": model, "cores": os.cpu_count()}


def run_point(tree: Path, n: int, updates: int) -> dict:
    load = os.getloadavg()
    proc = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "benchmarks.bench_scale", "--point", "mlp",
                           "asgd", str(n), str(updates)], cwd=tree, capture_output=True, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"point n={n} in {tree} failed")
    p = json.loads(proc.stdout.strip().splitlines()[-1])
    p["load_average_start"], p["load_average_end"] = load, os.getloadavg()
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the other checkout (extensions built)")
    ap.add_argument("--baseline-label", default="baseline", help="what the baseline is (e.g. a commit)")
    ap.add_argument("--n", type=int, nargs="+", default=[200, 10_000])
    ap.add_argument("--updates", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    trees = {"baseline": Path(args.baseline).resolve(), "this": ROOT}
    rec = {"what": f"virtual clock, MLP ASGD at n = {' and '.join(map(str, args.n))}: rate per CPU second in this "
                   f"tree and in {args.baseline_label}, alternating rounds",
           "date": time.strftime("%Y-%m-%d %H:%M"), "host": _host(), "model": "mlp", "rule": "asgd",
           "updates": args.updates, "baseline": args.baseline_label, "rounds": []}
    lo, hi = min(args.n), max(args.n)
    for r in range(args.rounds):
        row = {}
        for label, tree in trees.items():
            pts = {n: run_point(tree, n, args.updates) for n in args.n}
            row[label] = {"points": list(pts.values()),
                          "ratio_per_cpu_s": pts[hi]["updates_per_cpu_s"] / pts[lo]["updates_per_cpu_s"],
                          "ratio_per_wall_s": pts[hi]["updates_per_s"] / pts[lo]["updates_per_s"]}
            print(f"round {r + 1} {label:8s}: " + ", ".join(
                f"n={n} {p['updates_per_cpu_s']} upd/CPU s ({p['updates_per_s']} wall)" for n, p in pts.items())
                + f"; n={hi}/n={lo} per CPU s {row[label]['ratio_per_cpu_s']:.2f}", flush=True)
        rec["rounds"].append(row)
        Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")   # a round at a time
    for label in trees:
        rec[f"{label}_ratio_per_cpu_s_median"] = statistics.median(x[label]["ratio_per_cpu_s"] for x in rec["rounds"])
        rec[f"{label}_ratio_per_wall_s_median"] = statistics.median(x[label]["ratio_per_wall_s"] for x in rec["rounds"])
    Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")
    print(f"medians n={hi}/n={lo} per CPU s: baseline {rec['baseline_ratio_per_cpu_s_median']:.2f}, "
          f"this {rec['this_ratio_per_cpu_s_median']:.2f}; written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
