"""Where a paper-CNN SGD step's time goes under each numerics profile: per torch operator, forward and
backward, from torch's profiler (self CPU time per step, one thread, batch 10).

Each configuration runs in a fresh process (the profile is fixed per process), in turn within each
round, the order rotating; a row is an operator's median over rounds of its self time per step.
``--before TREE`` adds ``portable`` as computed by another checkout (the code before a change: its
directory on ``PYTHONPATH``, this virtual environment). Results: ``benchmarks/results/numerics-profile.json``
(short: the operators above 1 % of a step). Under portable, edgebed's own layers show as ``_Conv2d``,
``_Linear`` and their ``...Backward``; under native, oneDNN's ``mkldnn_convolution`` and MKL's ``addmm``/``mm``.

    .venv/bin/python -m benchmarks.profile_numerics [--rounds 3] [--steps 200] [--before /tmp/old-checkout]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks import bench_numerics
from edgebed import numerics

OUT = Path(__file__).resolve().parent / "results" / "numerics-profile.json"
CHILD = """
import json, sys
import numpy as np
from edgebed import numerics
numerics.enter(sys.argv[1])
import torch
torch.set_num_threads(1)
from torch.profiler import profile, ProfilerActivity
from edgebed.device_agent.trainer import Trainer
from edgebed.models import initial_theta
steps = int(sys.argv[2])
rng = np.random.default_rng(0)
x = rng.integers(0, 256, size=(600, 28, 28), dtype=np.uint8)
y = rng.integers(0, 10, size=600).astype(np.uint8)
theta, _ = initial_theta("cnn", 1)
tr = Trainer("cnn", x, y, 10, 1, 0)
for _ in range(20):
    tr.gradient(theta)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(steps):
        tr.gradient(theta)
out = {e.key: e.self_cpu_time_total / steps for e in prof.key_averages()}
print(json.dumps(out))
"""


def one(profile: str, steps: int, tree=None) -> dict:
    return bench_numerics.one(profile, steps, tree, child=CHILD)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--note", default="")
    ap.add_argument("--before", type=Path, help="another checkout: its portable profile too, as portable_before")
    args = ap.parse_args(argv)
    configs = {"native": ("native", None), "portable": ("portable", None)}
    result_before = str(args.before) if args.before else None
    if args.before:
        configs["portable_before"] = ("portable", args.before.resolve())
    got: dict[str, list[dict]] = {name: [] for name in configs}
    names = list(configs)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            got[name].append(one(*configs[name][:1], args.steps, configs[name][1]))
    result = {"what": "self CPU µs per paper-CNN SGD step (Trainer.gradient, batch 10, one thread) by torch "
                      "operator, median over rounds; operators under 1 % of the step left out",
              "date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "steps": args.steps,
              "note": args.note, "before": result_before, "cpu": numerics._cpu_model(), "cores": os.cpu_count(),
              "load_average_at_end": [round(v, 2) for v in os.getloadavg()]}
    for p, runs in got.items():
        ops = {k: statistics.median(run.get(k, 0.0) for run in runs) for k in set().union(*runs)}
        total = sum(ops.values())
        result[p] = {"total_us": round(total, 1),
                     "ops_us": {k: round(v, 1) for k, v in sorted(ops.items(), key=lambda kv: -kv[1])
                                if v >= 0.01 * total}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
