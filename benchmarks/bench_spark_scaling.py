"""Spark scaling benchmark: time and ingress to a target accuracy for 1, 2, 4, 8 workers in local[N].

    python -m benchmarks.bench_spark_scaling [--workers 1 2 4 8] [--target 0.9] [--quick]
        → benchmarks/results/spark_scaling.json, spark_scaling.md, spark_scaling.png

Each worker count n is one `edgebed run` on the Spark runtime with master local[n], n barrier tasks
of one agent each, the same data, model and algorithm. Time to target = wall time from the first
applied update to the first evaluation at or above the target accuracy (Spark's start-up is
reported apart); ingress to target = PS bytes received by then. Speedup S(n) = T(1)/T(n), with Amdahl and USL
fits (benchmarks/usl.py) as in the Spark papers' scaling tables. On 2 cores, n > 2 oversubscribes:
the curve then shows contention, which is what the fit's σ and κ measure. On a GPU machine add
``--gpus-per-task 1 --master-template 'local-cluster[{n},1,2048]'`` and nothing else changes.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Optional

from benchmarks.usl import amdahl, fit, speedups, usl
from edgebed.ps.rules import RULES

OUT = Path(__file__).parent / "results"


def scenario_for(n: int, args) -> dict:
    spark = {"master": args.master_template.format(n=n)}
    if args.gpus_per_task:
        spark["gpus_per_task"] = args.gpus_per_task
    return {
        "name": f"spark-scaling-{n}", "seed": args.seed,
        "dataset": {"partition": "iid", **({"train_samples": args.train_samples} if args.train_samples else {})},
        "model": {"name": args.model},
        "algorithm": {"name": args.algorithm, "lr": args.lr, "batch_size": 10,
                      **({"c": 0.01} if RULES[args.algorithm].uses_c() else {})},
        "workers": {"n": n},
        "stop": {"target_accuracy": args.target, "wall_time": f"{args.wall_time}s"},
        "eval": {"every": args.eval_every, "test_samples": args.test_samples},
        "runtime": {"name": "spark", "spark": spark},
    }


def to_target(run_path: Path, target: float, column: str = "wall_time") -> Optional[dict]:
    """The first evaluation at or above ``target`` (None if never): training time since the first
    applied update in ``column`` (wall_time, or virtual_time on the clock; so Spark's start-up, the same
    for every n, is not in it), that first update's time, update, ingress, accuracy."""
    from edgebed.rundir import read_table
    ev = read_table(run_path, "evals").sort_values("update")
    up = read_table(run_path, "updates")
    hit = ev[ev["accuracy"] >= target]
    if hit.empty or up.empty:
        return None
    row = hit.iloc[0]
    first = float(up[column].min())
    return {"time_s": float(row[column]) - first, "startup_s": first, "updates": int(row["update"]),
            "ingress_bytes": int(row["ingress_bytes"]), "accuracy": float(row["accuracy"])}


def run_one(n: int, args, out_dir: Path) -> dict:
    from edgebed.emulator.engine import Engine
    from edgebed.scenario import parse_scenario
    sc = parse_scenario(scenario_for(n, args), f"spark-scaling n={n}")
    t0 = time.monotonic()
    result = Engine(sc, out=out_dir).run()
    return {"workers": n, "master": sc.runtime.spark["master"], "run_dir": str(result.path),
            "total_wall_s": round(time.monotonic() - t0, 2), "summary": result.summary,
            "to_target": to_target(result.path, args.target)}


def report(rows: list[dict], target: float) -> tuple[dict, str]:
    times = {r["workers"]: r["to_target"]["time_s"] for r in rows if r["to_target"]}
    out: dict = {"target_accuracy": target, "runs": rows}
    lines = [f"# Spark scaling to {target:.0%} test accuracy", "",
             "| workers | time to target (s) | speedup | updates | ingress to target (MB) |",
             "|---:|---:|---:|---:|---:|"]
    s = speedups(times) if 1 in times else {}
    for r in rows:
        t = r["to_target"]
        if t is None:
            lines.append(f"| {r['workers']} | not reached | | {r['summary'].get('updates')} | |")
            continue
        sp = f"{s[r['workers']]:.2f}" if r["workers"] in s else ""
        lines.append(f"| {r['workers']} | {t['time_s']:.1f} | {sp} | {t['updates']} | "
                     f"{t['ingress_bytes'] / 1e6:.1f} |")
    if len(s) >= 2:
        f = fit(times)
        out["speedups"] = s
        out["fit"] = f.to_dict()
        peak = "∞" if f.to_dict()["usl_peak_n"] is None else f"{f.usl_peak:.1f}"
        lines += ["", f"Amdahl p = {f.p:.3f}; USL σ = {f.sigma:.3f}, κ = {f.kappa:.4f} (peak at n ≈ {peak})"]
    return out, "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    s = result.get("speedups")
    if not s:
        return
    ns = np.array(sorted(int(n) for n in s))
    grid = np.linspace(1, ns.max(), 100)
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot(ns, [s[n] for n in ns], "o", label="measured")
    ax.plot(grid, grid, ":", color="grey", label="linear")
    fitd = result["fit"]
    ax.plot(grid, amdahl(grid, fitd["amdahl_p"]), label=f"Amdahl p={fitd['amdahl_p']:.2f}")
    ax.plot(grid, usl(grid, fitd["usl_sigma"], fitd["usl_kappa"]),
            label=f"USL σ={fitd['usl_sigma']:.2f} κ={fitd['usl_kappa']:.3f}")
    ax.set_xlabel("workers (Spark barrier tasks)")
    ax.set_ylabel(f"speedup to {result['target_accuracy']:.0%}")
    ax.legend()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    p.add_argument("--algorithm", default="asgd", choices=list(RULES))
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--train-samples", type=int, default=None)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--test-samples", type=int, default=1000)
    p.add_argument("--wall-time", type=float, default=900)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--master-template", default="local[{n}]")
    p.add_argument("--gpus-per-task", type=float, default=0.0)
    p.add_argument("--quick", action="store_true", help="mlp, 1 and 2 workers, 85 %% target")
    p.add_argument("--out", type=Path, default=OUT, help="where the result files go")
    p.add_argument("--runs", type=Path, default=Path("runs/bench-spark-scaling"), help="run directories")
    args = p.parse_args(argv)
    if args.quick:
        args.model, args.workers, args.target = "mlp", [1, 2], min(args.target, 0.85)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.workers:
        rows.append(run_one(n, args, args.runs))
        t = rows[-1]["to_target"]
        print(f"n={n}: " + (f"{t['time_s']:.1f} s after {t['startup_s']:.1f} s start-up, {t['updates']} updates, "
                            f"{t['ingress_bytes'] / 1e6:.1f} MB"
                            if t else "target not reached"), flush=True)
    result, table = report(rows, args.target)
    (args.out / "spark_scaling.json").write_text(json.dumps(result, indent=2, default=str))
    (args.out / "spark_scaling.md").write_text(table)
    plot(result, args.out / "spark_scaling.png")
    print(table)


if __name__ == "__main__":
    main()
