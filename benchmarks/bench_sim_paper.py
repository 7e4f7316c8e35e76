"""Benchmark: the paper's Fig. 3 AdaComp scenario on the virtual-clock runtime vs its compute floor.

    .venv/bin/python benchmarks/bench_sim_paper.py [--updates 20000] [--out benchmarks/results/sim_paper.json]

Runs scenarios/paper-fig3-adacomp.yaml (n = 200, c = 0.01, b = 10, CNN, bundled digits) with
``runtime: sim`` for ``--updates`` updates (the paper: 250,000) and records wall time, updates/s and
peak memory (max RSS of this process: the sim runs PS, devices and evaluator in it).

Compute floor = the same number of SGD steps timed alone: ``Trainer.step`` (gradient on b = 10 samples
+ AdaComp's per-layer top-c, exactly what a device does per update) on one device, one at a time, with
the sim's torch thread count, extrapolated from a sample: ``--sample`` steps before the run, and
``--probe`` steps every ``--probe-every`` seconds *during* the run (from the progress callback, so the
sample sees the same host load as the run; the probes' own time is subtracted from the run's wall
time). The batched path (``BatchedGradient`` over ``max_batch`` devices + compression) is timed before
the run for comparison. Goal (issue 4): wall ≤ 1.5 × floor.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def time_steps(model: str, n_steps: int, threads: int, batch: int = 1) -> float:
    """Seconds per worker-step: ``batch == 1`` → Trainer.gradient + compression one at a time; else batched gradients."""
    import torch
    from edgebed.data import load_bundled, partition
    from edgebed.device_agent.batched import BatchedGradient, trainer_batches
    from edgebed.compression import make_compressor
    from edgebed.device_agent.trainer import Trainer
    from edgebed.models import initial_theta
    torch.set_num_threads(threads)
    ds = load_bundled(0.2, 1)
    shards = partition(ds.train_y, 200, "iid", 1)
    k = max(batch, 1)
    trainers = [Trainer(model, ds.train_x[shards[d]], ds.train_y[shards[d]], 10, 1, d) for d in range(k)]
    comp = make_compressor("top-c-per-layer", 0.01, trainers[0].layers)
    theta, _ = initial_theta(model, 1)
    thetas = [theta + np.float32(1e-3) * d for d in range(k)]
    if batch == 1:
        tr = trainers[0]
        for _ in range(20):
            comp.compress(tr.gradient(theta)[0])
        t0 = time.perf_counter()
        for _ in range(n_steps):
            comp.compress(tr.gradient(theta)[0])
        return (time.perf_counter() - t0) / n_steps
    bg = BatchedGradient(model, 1)
    rounds = max(2, n_steps // k)
    bg(thetas, *trainer_batches(trainers))
    t0 = time.perf_counter()
    for _ in range(rounds):
        grads, _ = bg(thetas, *trainer_batches(trainers))
        for tr, g in zip(trainers, grads):
            comp.compress(g)
    return (time.perf_counter() - t0) / (rounds * k)


class Probe:
    """Times ``steps`` sequential gradient + compression calls every ``every`` seconds (floor samples)."""

    def __init__(self, model: str, threads: int, steps: int, every: float):
        self.model, self.threads, self.steps, self.every = model, threads, steps, every
        self.samples: list[float] = []
        self.spent = 0.0
        self.last = time.perf_counter()
        self.trainer = self.theta = None

    def maybe(self) -> None:
        now = time.perf_counter()
        if now - self.last < self.every:
            return
        if self.trainer is None:
            from edgebed.data import load_bundled
            from edgebed.compression import make_compressor
            from edgebed.device_agent.trainer import Trainer
            from edgebed.models import initial_theta
            ds = load_bundled(0.2, 1)
            self.trainer = Trainer(self.model, ds.train_x[:40], ds.train_y[:40], 10, 1, 0)
            self.comp = make_compressor("top-c-per-layer", 0.01, self.trainer.layers)
            self.theta, _ = initial_theta(self.model, 1)
        t0 = time.perf_counter()
        for _ in range(self.steps):
            self.comp.compress(self.trainer.gradient(self.theta)[0])
        t1 = time.perf_counter()
        self.samples.append((t1 - t0) / self.steps)
        self.spent += t1 - now
        self.last = t1

    def mean(self) -> float:
        return float(np.mean(self.samples))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--updates", type=int, default=20_000, help="updates to run (paper: 250000)")
    ap.add_argument("--sample", type=int, default=1000, help="SGD steps timed for the compute floor")
    ap.add_argument("--probe", type=int, default=50, help="SGD steps per probe during the run")
    ap.add_argument("--probe-every", type=float, default=10.0, help="seconds between probes")
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "paper-fig3-adacomp.yaml"))
    ap.add_argument("--set", action="append", default=[], help="scenario override key=value")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sim_paper.json"))
    ap.add_argument("--runs", default=None, help="keep the run directory here (default: a temp dir)")
    args = ap.parse_args(argv)

    from edgebed.console import RunProgress
    from edgebed.emulator.engine import Engine
    from edgebed.emulator.runtimes.sim import SimSpec
    from edgebed.scenario import load_scenario
    sc = load_scenario(args.scenario, (f"stop.updates={args.updates}", *args.set))
    sim = sc.runtime.sim
    spec = SimSpec(**sim)
    threads, max_batch = spec.threads, spec.max_batch

    floor_before = time_steps(sc.model.name, args.sample, threads)
    # the batched path is timed whether or not the run uses it (32 when it doesn't): is it worth it here?
    batched_k = max_batch if max_batch > 1 else 32
    batched_before = time_steps(sc.model.name, args.sample, threads, batched_k)
    out_dir = Path(args.runs) if args.runs else Path(tempfile.mkdtemp(prefix="edgebed-bench-"))
    show = RunProgress(sys.stderr, every=30)
    probe = Probe(sc.model.name, threads, args.probe, args.probe_every)

    def progress(line: str, final: bool) -> None:
        show(line, final)
        probe.maybe()
    t0 = time.perf_counter()
    result = Engine(sc, out=out_dir, progress=progress).run()
    wall = time.perf_counter() - t0 - probe.spent
    step = probe.mean() if probe.samples else floor_before
    s = result.summary
    simstats = json.loads((result.path / "sim.json").read_text())
    updates = s["updates"]
    floor = updates * step
    rec = {
        "scenario": sc.name, "updates": updates, "n": sc.workers.n, "algorithm": sc.algorithm.name,
        "c": getattr(sc.algorithm, "c", None), "batch_size": sc.algorithm.batch_size, "model": sc.model.name,
        "sim": {"threads": threads, "max_batch": max_batch, **simstats},
        "wall_time_s": round(wall, 1), "engine_wall_time_s": s["wall_time_s"],
        "updates_per_s": round(updates / wall, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "compute_floor": {
            "how": f"Trainer.step (gradient + per-layer top-c) one at a time, {threads} torch thread(s): "
                   f"{args.probe} steps every {args.probe_every:g} s during the run in this process "
                   f"({len(probe.samples)} probes), mean step × updates",
            "step_ms_during_run": round(step * 1e3, 3),
            "step_ms_probe_min_max": [round(min(probe.samples, default=0) * 1e3, 3),
                                      round(max(probe.samples, default=0) * 1e3, 3)],
            "step_ms_before_run": round(floor_before * 1e3, 3), "probe_time_excluded_s": round(probe.spent, 1),
            "floor_s": round(floor, 1),
            "batched_step_ms_before": round(batched_before * 1e3, 3), "batched_k": batched_k,
        },
        "wall_over_floor": round(wall / floor, 2),
        "goal": "wall <= 1.5 x floor",
        "final_accuracy": s["final_accuracy"], "ingress_bytes": s["ingress_bytes"],
        "virtual_time_s": simstats.get("virtual_time_s"),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                 "loadavg_at_end": os.getloadavg()},
        "run_dir": str(result.path),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")
    print(json.dumps(rec, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
