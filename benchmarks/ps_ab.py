"""The PS ingest benchmark in two checkouts, alternating: this tree against a baseline.

    python -m benchmarks.ps_ab --baseline DIR [--rounds 3] [--seconds 1]
                               [--out benchmarks/results/ps-ingest-ab.json]

``DIR``: another checkout of edgebed with its compiled extensions built (``python setup.py build_ext
--inplace``), e.g. ``git archive`` of the commit before a change, with this tree's
``benchmarks/bench_ps.py`` copied in. Each round runs ``bench_ps --ingest`` (one round of AdaComp and
ASGD, CPUs shared and pinned: the real PS, its numpy path, the canned-Ack stub and raw, alternating,
see bench_ps) once in each tree, baseline first, in a subprocess whose cwd is the tree (so that tree's
``edgebed`` is imported). Per tree and setting: the medians over the rounds of pushes/s and of PS/raw
(each round's ratio is taken within that round). The host's CPU model and load are recorded.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ps-ingest-ab.json"
KEYS = ("ps_pushes_per_s", "raw_zmq_msgs_per_s", "ps_over_raw", "stub_over_raw", "numpy_over_raw",
        "ps_cpu_us_per_push", "raw_cpu_us_per_msg")


def run_once(tree: Path, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ingest.json"
        proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_ps", "--ingest", str(out), "--rounds", "1",
                               "--seconds", str(seconds)], cwd=tree, capture_output=True, text=True)
        if proc.returncode:
            sys.stderr.write(proc.stderr[-3000:])
            raise SystemExit(f"bench_ps --ingest in {tree} failed")
        return json.loads(out.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the other checkout (extensions built)")
    ap.add_argument("--baseline-label", default="baseline", help="what the baseline is (e.g. a commit)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    trees = {"baseline": Path(args.baseline).resolve(), "this": ROOT}
    rec = {"what": f"PS ingest (bench_ps --ingest) in this tree and in {args.baseline_label}, alternating rounds",
           "date": time.strftime("%Y-%m-%d %H:%M"), "baseline": args.baseline_label, "seconds_each": args.seconds,
           "runs": {label: [] for label in trees}}
    for r in range(args.rounds):
        for label, tree in trees.items():
            res = run_once(tree, args.seconds)
            rec["runs"][label].append(res)
            print(f"round {r + 1} {label:8s} (load {res['host']['load_average'][0]:.1f}): " + ", ".join(
                f"{x['rule']} {'pinned' if x['pinned'] else 'shared'} {x['ps_over_raw']:.2f}" for x in res["ingest"]),
                flush=True)
    rec["host"] = rec["runs"]["this"][0]["host"]
    rec["load_average_end"] = os.getloadavg()
    rec["medians"] = {}
    for label in trees:
        rows = {}
        for res in rec["runs"][label]:
            for x in res["ingest"]:
                rows.setdefault(f"{x['rule']} {'pinned' if x['pinned'] else 'shared'}", []).append(x)
        rec["medians"][label] = {k: {key: statistics.median(x[key] for x in xs) for key in KEYS}
                                 for k, xs in rows.items()}
    Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")
    lines = [f"{rec['date']}, {rec['host']['cpu_model']}, {rec['host']['cores']} cores, load average at the first "
             f"run / end: {rec['runs']['baseline'][0]['host']['load_average'][0]:.1f} / {rec['load_average_end'][0]:.1f}; "
             f"`python -m benchmarks.ps_ab`: {args.rounds} rounds, each `bench_ps --ingest --rounds 1 --seconds "
             f"{args.seconds:g}` in the baseline ({args.baseline_label}) then in this tree; medians over the rounds", "",
             "| setting | tree | PS pushes/s | raw msgs/s | PS/raw [rounds] | stub/raw | PS CPU µs/push | raw CPU µs/msg |",
             "|---|---|---|---|---|---|---|---|"]
    for k in rec["medians"]["this"]:
        for label in trees:
            m = rec["medians"][label][k]
            per = ", ".join(f"{x['ps_over_raw']:.2f}" for res in rec["runs"][label] for x in res["ingest"]
                            if f"{x['rule']} {'pinned' if x['pinned'] else 'shared'}" == k)
            lines.append(f"| {k} | {label} | {m['ps_pushes_per_s']:.0f} | {m['raw_zmq_msgs_per_s']:.0f} | "
                         f"{m['ps_over_raw']:.2f} [{per}] | {m['stub_over_raw']:.2f} | {m['ps_cpu_us_per_push']:.1f} | "
                         f"{m['raw_cpu_us_per_msg']:.1f} |")
    Path(args.out).with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
