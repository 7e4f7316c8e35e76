"""Is the virtual clock's batched gradient (torch.func.vmap over k devices) worth it on this CPU?

Per gradient (with AdaComp's top-c selection), one torch thread: one at a time (``Trainer.gradient``)
against batches of 32 (``BatchedGradient``), in alternating rounds so both see the same host. The
answer sets ``runtime.sim.max_batch``'s default (edgebed/emulator/runtimes/sim.py).

    python -m benchmarks.bench_sim_batch [--rounds 5] [--steps 200] [--out benchmarks/results/sim_batch.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.bench_sim_paper import time_steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200, help="gradients per measurement")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", default="benchmarks/results/sim_batch.json")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()
    models = {}
    for model in ("cnn", "mlp"):
        one, batched = [], []
        for _ in range(args.rounds):
            one.append(time_steps(model, args.steps, 1, 1) * 1e3)
            batched.append(time_steps(model, args.steps, 1, args.batch) * 1e3)
        models[model] = {
            "one_at_a_time_ms": [round(v, 3) for v in one],
            f"batched_{args.batch}_ms": [round(v, 3) for v in batched],
            "median_one_ms": round(statistics.median(one), 3),
            "median_batched_ms": round(statistics.median(batched), 3),
            "batched_over_one": round(statistics.median(batched) / statistics.median(one), 2)}
        print(model, models[model], flush=True)
    rec = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": {"cores": os.cpu_count()}, "torch_threads": 1,
           "what": "ms per gradient incl. AdaComp c=0.01 selection; rounds alternate one-at-a-time / batched",
           "batch": args.batch, "steps_per_measurement": args.steps, "rounds": args.rounds,
           "load_average_start": load_start, "load_average_end": os.getloadavg(), "models": models}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
