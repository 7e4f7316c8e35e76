"""What the portable numerics profile costs per SGD step (``edgebed/numerics.py``), against native.

Each round starts one fresh process per profile (a profile is fixed per process: its variables must
precede torch's first operation), alternating the order, and times one device's gradient computation
(``Trainer.gradient``: Θ copied in, forward, backward, gradient out) for the MLP and the paper CNN,
batch 10, one thread, in CPU seconds of that process (``time.process_time``), so other load on the
machine inflates the numbers less than wall time would. The ratio portable / native is taken within
each round. ``--before TREE`` adds a third process per round, ``portable`` as another checkout computes
it (the code before a change: its directory on ``PYTHONPATH``, this virtual environment), and its ratio
to native in the same round. Results: ``benchmarks/results/numerics.json``.

    .venv/bin/python -m benchmarks.bench_numerics [--rounds 5] [--steps 300] [--before /tmp/old-checkout]
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

OUT = Path(__file__).resolve().parent / "results" / "numerics.json"
CHILD = """
import json, sys, time
import numpy as np
from edgebed import numerics
fp = numerics.enter(sys.argv[1])
import torch
torch.set_num_threads(1)
from edgebed.device_agent.trainer import Trainer
from edgebed.models import initial_theta
steps = int(sys.argv[2])
rng = np.random.default_rng(0)
x = rng.integers(0, 256, size=(600, 28, 28), dtype=np.uint8)
y = rng.integers(0, 10, size=600).astype(np.uint8)
out = {"fingerprint": fp}
for model in ("mlp", "cnn"):
    theta, _ = initial_theta(model, 1)
    tr = Trainer(model, x, y, 10, 1, 0)
    for _ in range(20):
        tr.gradient(theta)                       # warm-up: first-call allocations, kernel set-up
    t0 = time.process_time()
    for _ in range(steps):
        tr.gradient(theta)
    out[model] = (time.process_time() - t0) / steps * 1e3
print(json.dumps(out))
"""


def one(profile: str, steps: int, tree=None, child: str = CHILD) -> dict:
    """``child`` run for ``profile`` in a fresh process (of checkout ``tree``, default this one): its
    last line, JSON."""
    env = numerics.child_env("native", {k: v for k, v in os.environ.items() if k not in numerics.PINS})
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    out = subprocess.run([sys.executable, "-c", child, profile, str(steps)], env=env, check=True,
                         capture_output=True, text=True, cwd=tree)   # -c puts the working directory first
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--before", type=Path, help="another checkout: its portable too, as portable_before")
    ap.add_argument("--note", default="", help="what --before is, the host's state: recorded in the results")
    args = ap.parse_args(argv)
    configs = {"native": ("native", None), "portable": ("portable", None)}
    if args.before:
        configs["portable_before"] = ("portable", args.before.resolve())
    names = list(configs)
    rounds, fps = [], {}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]   # each first in turn
        got = {p: one(configs[p][0], args.steps, configs[p][1]) for p in order}
        fps = {p: got[p]["fingerprint"] for p in got}
        row = {f"{p}_{m}_ms": round(got[p][m], 4) for p in got for m in ("mlp", "cnn")}
        row.update({f"ratio_{m}": round(got["portable"][m] / got["native"][m], 3) for m in ("mlp", "cnn")})
        if args.before:
            row.update({f"ratio_before_{m}": round(got["portable_before"][m] / got["native"][m], 3)
                        for m in ("mlp", "cnn")})
        rounds.append(row)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v}" for k, v in row.items()), file=sys.stderr)
    summary = {k: {"median": statistics.median(r[k] for r in rounds), "min": min(r[k] for r in rounds),
                   "max": max(r[k] for r in rounds)} for k in rounds[0]}
    load = os.getloadavg()
    result = {
        "what": "CPU ms per SGD step (Trainer.gradient, batch 10, one thread) under each numerics profile",
        "date": time.strftime("%Y-%m-%d"), "steps_per_model": args.steps,
        "before": str(args.before) if args.before else None, "note": args.note,
        "load_average_at_end": [round(x, 2) for x in load], "cores": os.cpu_count(),
        "summary": summary, "rounds": rounds,
        "fingerprints": {p: {k: fp.get(k) for k in ("id", "profile", "cpu_capability", "onednn", "mkl", "torch", "cpu",
                                                    "reference_gradient", "reproducible", "gemm")}
                         for p, fp in fps.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
