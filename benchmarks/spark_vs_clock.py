"""The real Spark runtime on ``local-cluster`` beside the virtual clock's prediction for the same setting.

    .venv/bin/python -m benchmarks.spark_vs_clock [--master 'local-cluster[2,1,1024]'] [--tau 16]
        → benchmarks/results/spark_vs_clock.json, spark_vs_clock.md

One SparkNet periodic-averaging run of ``scenarios/datacenter-averaging.yaml`` (K = 2 workers, τ local
steps, the MLP, to a target accuracy) on the Spark runtime, then the same scenario on the virtual clock
with C = this host's measured time of one local SGD step (the median of ``--steps`` timed steps in this
process, after the Spark run) and S = 0. Both read time to target from the first applied update (Spark's start-up apart)
to the first evaluation at or above the target. The rounds to target are the algorithm's; the gap in
time, divided by the rounds, is the per-round overhead S that Spark adds on this machine beyond
K·τ·C of compute — what ``runtime.sim.sync_time`` would have to be for the clock to match. The host's
CPU model and load average are recorded: on a shared 2-core host the real times are noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_spark_scaling import to_target  # noqa: E402
OUT = ROOT / "benchmarks" / "results"
SCENARIO = ROOT / "scenarios" / "datacenter-averaging.yaml"


def measure_step_time(model: str, steps: int, seed: int = 1) -> float:
    """Median seconds of one local SGD step (b = 10) of ``model`` on the bundled MNIST, in this process
    with one torch thread (as the virtual clock's default; two threads spin-wait on a busy 2-core host:
    85 ms against 0.47 ms a step, measured), after 20 untimed steps."""
    import torch
    torch.set_num_threads(1)
    from edgebed.data import load_bundled
    from edgebed.device_agent.trainer import Trainer
    from edgebed.models import initial_theta
    ds = load_bundled(0.2)
    tr = Trainer(model, ds.train_x[:2000], ds.train_y[:2000], 10, seed, 0)
    tr.set_params(initial_theta(model, seed)[0])
    for _ in range(20):
        tr.local_step(0.05)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        tr.local_step(0.05)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run(overrides: list[str], out: Path):
    from edgebed.emulator.engine import Engine
    from edgebed.scenario import load_scenario
    return Engine(load_scenario(SCENARIO, tuple(overrides)), out=out).run()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--master", default="local-cluster[2,1,1024]")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--tau", type=int, default=16)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--steps", type=int, default=300, help="timed local steps for C")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--runs", type=Path, default=Path("runs/spark-vs-clock"))
    a = p.parse_args(argv)
    common = [f"workers.n={a.k}", f"algorithm.local_steps={a.tau}", f"eval.every={a.k}",
              f"stop.target_accuracy={a.target}", "stop.updates=2000", "stop.wall_time=10min"]
    t0 = time.monotonic()
    real = run([*common, "runtime.name=spark", f"runtime.spark.master={a.master}"], a.runs)
    real_wall = time.monotonic() - t0
    c = measure_step_time("mlp", a.steps)   # after the engine set this process's numerics profile
    clock = run([*common, "runtime.name=sim", f"runtime.sim.step_time={c}", "runtime.sim.sync_time=0"], a.runs)
    r, v = to_target(real.path, a.target, "wall_time"), to_target(clock.path, a.target, "virtual_time")
    result = {"what": f"SparkNet averaging (K={a.k}, tau={a.tau}, MLP) on Spark {a.master} vs the virtual "
                      f"clock's prediction with this host's C and S = 0, time to {a.target:.0%}",
              "date": time.strftime("%Y-%m-%d %H:%M"), "cpu": platform.processor() or platform.machine(),
              "cpu_model": _cpu_model(), "load_average": os.getloadavg(), "c_measured_s": c,
              "master": a.master, "k": a.k, "tau": a.tau, "target": a.target,
              "spark": {"run": str(real.path), "status": real.summary["status"], "to_target": r,
                        "rounds": real.summary.get("rule", {}).get("rounds"), "total_wall_s": round(real_wall, 1)},
              "clock": {"run": str(clock.path), "status": clock.summary["status"], "to_target": v,
                        "rounds": clock.summary.get("rule", {}).get("rounds")}}
    lines = [f"# Spark `{a.master}` vs the virtual clock: SparkNet averaging, K = {a.k}, τ = {a.tau}, MLP, "
             f"to {a.target:.0%}", "",
             f"C measured here: {c * 1e3:.2f} ms per local step (median of {a.steps}); host {result['cpu_model']}, "
             f"load average {result['load_average'][0]:.1f} at the end.", ""]
    if r and v:
        rounds_r, rounds_v = r["updates"] / a.k, v["updates"] / a.k
        gap = (r["time_s"] - v["time_s"]) / max(rounds_r - 1, 1)
        result["ratio_real_to_clock"] = r["time_s"] / v["time_s"] if v["time_s"] else None
        result["implied_sync_time_s"] = gap
        lines += ["| | rounds to target | time to target (s) | per round (s) |", "|---|---|---|---|",
                  f"| Spark ({a.master}) | {rounds_r:.0f} | {r['time_s']:.2f} (wall) | {r['time_s'] / max(rounds_r - 1, 1):.3f} |",
                  f"| virtual clock, C = {c * 1e3:.2f} ms, S = 0 | {rounds_v:.0f} | {v['time_s']:.2f} (virtual) | "
                  f"{v['time_s'] / max(rounds_v - 1, 1):.3f} |", "",
                  f"Real / predicted time: {result['ratio_real_to_clock']:.1f}×. Spark adds "
                  f"{gap:.3f} s per round here beyond τ·C (the S at which the clock would match; first "
                  f"update {r['startup_s']:.1f} s after the engine started, Spark's start-up, left out). The real "
                  "rounds include the PS's evaluation of the test set after each round (eval.every = K), which "
                  "the virtual clock does not charge; one run, on a shared host."]
    else:
        lines.append(f"Target not reached: Spark {r}, clock {v}.")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "spark_vs_clock.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (a.out / "spark_vs_clock.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
