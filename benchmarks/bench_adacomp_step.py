"""CPU time of AdaComp's step at the PS (``AdaComp.apply``: σ from the touch log, the apply, the log's
append) by model size, without sockets or decoding, so a loaded host inflates it less than ingest.

    python -m benchmarks.bench_adacomp_step FILE   → FILE (json) and FILE with .md

Two regimes per size (``tests.sized_models``; top-1 % per layer, ``bench_ps.payload``'s compressor):

- *run*: 4 devices push in turn and pull again after each push, 8 distinct top-c selections (a
  run's steady state: short touch lists). Median over blocks of CPU µs per push (push + re-pull).
- *stale*: ``bench_ps --sizes``'s pattern, the same entries every push and the pulls never renewed,
  so every pushed list grows, doubles and moves. CPU ms of the first push of a fresh rule, and the
  mean and median over the first 40 pushes (what a 2-s ingest round at 11 M sees).

Run it on two trees with the same interpreter (``PYTHONPATH=<tree>``) to compare code versions.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_ps import _host, payload
from edgebed.models import initial_theta
from edgebed.ps.rules import AdaComp

SIZES = {"0.2 M (mlp)": "mlp", "1 M": "tests.sized_models:mlp_1m", "11 M": "tests.sized_models:mlp_11m"}


def run_regime(model: str, pushes: int, devices: int = 4, blocks: int = 5) -> dict:
    theta, layers = initial_theta(model, 0)
    sets = [payload("adacomp", layers, theta.size, np.random.default_rng(s)) for s in range(8)]
    rule = AdaComp(theta, 0.01)
    for d in range(devices):
        rule.on_pull(d, 0)
    per_block = []
    for b in range(blocks + 1):   # the first block warms up (lists reach their steady length)
        t = time.process_time()
        for p in range(b * pushes, (b + 1) * pushes):
            v, idx = sets[p % 8]
            rule.apply(p % devices, 1, v, idx)
            rule.on_pull(p % devices, p)
        per_block.append((time.process_time() - t) / pushes * 1e6)
    return {"entries": int(sets[0][1].size), "us_per_push": statistics.median(per_block[1:]),
            "us_per_push_blocks": per_block[1:]}


def stale_regime(model: str, pushes: int = 40) -> dict:
    theta, layers = initial_theta(model, 0)
    v, idx = payload("adacomp", layers, theta.size, np.random.default_rng(0))
    rule = AdaComp(theta, 0.01)
    for d in range(2):
        rule.on_pull(d, 0)
    ms = []
    for p in range(pushes):
        t = time.process_time()
        rule.apply(p % 2, 1, v, idx)
        ms.append((time.process_time() - t) * 1e3)
    return {"first_push_ms": ms[0], "mean_ms": statistics.mean(ms), "median_ms": statistics.median(ms),
            "pushes": pushes}


def main(argv=None) -> int:
    out = Path((argv or sys.argv[1:])[0])
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "host_start": _host(), "rows": []}
    for label, model in SIZES.items():
        row = {"size": label, "model": model, "run": run_regime(model, 2000 if label != "11 M" else 40),
               "stale": stale_regime(model)}
        res["rows"].append(row)
        print(label, row["run"]["us_per_push"], row["stale"], flush=True)
    res["load_average_end"] = os.getloadavg()
    out.write_text(json.dumps(res, indent=2) + "\n")
    write_md(res, out.with_suffix(".md"))
    return 0


def write_md(res: dict, path: Path) -> None:
    h = res["host_start"]
    lines = [f"{res['date']}, {h['cpu_model']}, {h['cores']} cores, load average at start / end: "
             f"{h['load_average'][0]:.1f} / {res['load_average_end'][0]:.1f}; CPU time of AdaComp.apply", "",
             "| model | entries a push | run: µs a push | stale: first push ms | stale: mean / median ms (40) |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['size']} | {r['run']['entries']:,} | {r['run']['us_per_push']:.0f} | "
              f"{r['stale']['first_push_ms']:.2f} | {r['stale']['mean_ms']:.2f} / {r['stale']['median_ms']:.2f} |"
              for r in res["rows"]]
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
