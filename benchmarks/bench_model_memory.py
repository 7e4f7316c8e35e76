"""Memory per device of a large model on the virtual clock: RSS per added device, ResNet-50's size.

    python -m benchmarks.bench_model_memory [--model tests.sized_models:mlp_25m] [--n 1 2 4] [--updates 8]
                                            [--out benchmarks/results/model_memory-25m.json]

Each point is ``benchmarks.bench_scale``'s (its scenario: every device draws 300 samples of the bundled
digits, one speed class, unshaped links; peak RSS ``ru_maxrss`` of a subprocess in which PS, devices,
data and evaluator all live), run once per n, one at a time, niced. What a device costs is the slope:
``per_added_device`` = (peak(n) − peak(n₀)) / (n − n₀) against the smallest n, so the fixed costs
(torch, the PS's Θ and its rule's state, the evaluator's model and test set) drop out. Rules: ASGD
(dense pushes of 4·|Θ| bytes) and AdaComp (c = 0.01; the PS keeps a snapshot of its update counters
per outstanding pull).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "model_memory-25m.json"


def _host() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown")
    return {"cpu_model": model, "cores": os.cpu_count(),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}


def run_point(model: str, rule: str, n: int, updates: int) -> dict:
    load = os.getloadavg()
    proc = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "benchmarks.bench_scale", "--point",
                           model, rule, str(n), str(updates)], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"point {model} {rule} n={n} failed")
    p = json.loads(proc.stdout.strip().splitlines()[-1])
    keep = ("n", "updates", "status", "wall_s", "peak_rss_bytes", "rss_before_bytes", "predicted_bytes",
            "predicted_per_device", "devices_pushed")
    return {**{k: p[k] for k in keep}, "load_average_start": load}


def slopes(points: list[dict]) -> None:
    """Adds ``per_added_device`` (bytes) to each point past the first, against the first."""
    base = points[0]
    for p in points[1:]:
        p["per_added_device"] = round((p["peak_rss_bytes"] - base["peak_rss_bytes"]) / (p["n"] - base["n"]))


def markdown(rec: dict) -> str:
    h = rec["host"]
    lines = [f"Memory per device on the virtual clock, {rec['model']} ({rec['parameters']:,} parameters, "
             f"{4 * rec['parameters'] / 2**20:.0f} MiB of float32), {rec['updates']} updates a point "
             f"({rec['date']}, {h['cpu_model']}, {h['cores']} cores, {h['memory_bytes'] / 2**30:.0f} GiB shared): "
             "`python -m benchmarks.bench_model_memory`", "",
             "| rule | n | peak RSS MiB | per added device MiB | predicted per device MiB | load at start |",
             "|---|---|---|---|---|---|"]
    for rule, pts in rec["rules"].items():
        for p in pts:
            added = f"{round(p['per_added_device'] / 2**20):d}" if "per_added_device" in p else "—"
            lines.append(f"| {rule} | {p['n']} | {p['peak_rss_bytes'] / 2**20:.0f} | {added} "
                         f"| {p['predicted_per_device'] / 2**20:.0f} | {p['load_average_start'][0]:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tests.sized_models:mlp_25m")
    ap.add_argument("--rules", nargs="+", default=["asgd", "adacomp"])
    ap.add_argument("--n", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--updates", type=int, default=8)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    from edgebed.models import model_layers
    layers = model_layers(args.model)
    rec = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": _host(), "model": args.model,
           "parameters": sum(x.size for x in layers), "updates": args.updates, "rules": {}}
    for rule in args.rules:
        pts = []
        for n in sorted(args.n):
            pts.append(run_point(args.model, rule, n, args.updates))
            print(f"{rule} n={n}: peak {pts[-1]['peak_rss_bytes'] / 2**20:.0f} MiB", flush=True)
        slopes(pts)
        rec["rules"][rule] = pts
    rec["load_average_end"] = os.getloadavg()
    out = Path(args.out)
    out.write_text(json.dumps(rec, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(rec))
    print(f"written {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
