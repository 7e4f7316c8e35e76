"""Benchmark: the virtual clock's updates per wall second with its device work on 1 vs N worker processes.

    .venv/bin/python -m benchmarks.bench_sim_workers [--rounds 3] [--updates-cnn 1500] [--updates-resnet 600]
        [--workers 1 2] [--n 20] [--executor local|ray] [--out benchmarks/results/sim_workers]

The paper's CNN and the zoo's ResNet-8 (``resnet20`` with depth 8, 1×28×28 input) under ASGD, n devices
(default 20) of one speed class, on the virtual clock (``runtime.sim``); ``runtime.sim.workers`` is the
only thing that differs between the runs of a pair. Pairs are alternated (1, 2, then 2, 1, ...) so both
see the same host, and the load average is recorded before and after each run. Per run: the steady rate
(updates per wall second between the run's 10 % and last update, from the updates table's wall-clock
column: worker start-up excluded), the whole run's rate (engine's ``updates_per_s``: start-up included),
CPU seconds of the process and its workers, and the SHA-256 per column of the tables, which must be the
same for every worker count (the benchmark fails otherwise). Writes ``OUT.json`` and ``OUT.md``.
``--executor ray``: the runs with more than one worker use Ray actors on a local cluster of as many
one-CPU raylets as the largest worker count (``ray.cluster_utils.Cluster``, started once).
Goal (issue 55): with 2 workers on a 2-core host, ≥ 1.7× the steady rate of 1 worker.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = {
    "cnn": {"name": "cnn"},
    "resnet8": {"name": "resnet20", "args": {"depth": 8, "in_channels": 1, "size": 28}},
}


def scenario(model: str, n: int, updates: int, workers: int, ray_address: str | None = None) -> dict:
    return {
        "name": f"bench-workers-{model}-{workers}", "seed": 1, "dataset": {"train_samples": 6000},
        "model": copy.deepcopy(MODELS[model]), "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
        "workers": {"n": n, "classes": [{"name": "all", "share": 1.0, "slowdown": 1, "think_time": "2ms"}]},
        "stop": {"updates": updates}, "eval": {"every": updates, "test_samples": 200},
        "runtime": {"name": "sim", "sim": {"workers": workers, **(
            {"executor": "ray", "ray_address": ray_address} if ray_address and workers > 1 else {})}},
    }


def run_once(sc: dict) -> dict:
    from edgebed.emulator.engine import Engine
    from edgebed.rundir import read_table
    from edgebed.scenario import parse_scenario
    from tests.integration.test_sim_golden import TABLES, column_hashes
    load_before = os.getloadavg()
    cpu0 = _cpu()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        result = Engine(parse_scenario(copy.deepcopy(sc)), out=Path(tmp)).run()
        wall = time.monotonic() - t0
        updates = read_table(result.path, "updates")
        hashes = {t: column_hashes(read_table(result.path, t)) for t in TABLES}
        sim = json.loads((result.path / "sim.json").read_text())
    t = updates["wall_time"].to_numpy()
    first = len(t) // 10
    steady = (len(t) - 1 - first) / (t[-1] - t[first])
    return {"updates": result.summary["updates"], "wall_s": round(wall, 3),
            "steady_updates_per_s": round(float(steady), 2), "run_updates_per_s": result.summary["updates_per_s"],
            "cpu_s": round(_cpu() - cpu0, 2), "clock_waited_s": sim.get("worker_wait_s"),
            "load_before": [round(v, 2) for v in load_before],
            "load_after": [round(v, 2) for v in os.getloadavg()], "tables": hashes}


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (the workers, once ended)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternated pairs per model")
    ap.add_argument("--updates-cnn", type=int, default=1500)
    ap.add_argument("--updates-resnet", type=int, default=600)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--n", type=int, default=20, help="devices")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--executor", default="local", choices=["local", "ray"])
    ap.add_argument("--out", default="benchmarks/results/sim_workers", help="writes OUT.json and OUT.md")
    args = ap.parse_args(argv)
    cluster = address = None
    if args.executor == "ray":
        from ray.cluster_utils import Cluster
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        for _ in range(max(args.workers) - 1):
            cluster.add_node(num_cpus=1)
        address = cluster.address
    try:
        return measure(args, address)
    finally:
        if cluster is not None:
            cluster.shutdown()


def measure(args, address) -> int:
    from edgebed import numerics
    fp = numerics.enter("portable")
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": " ".join(sys.argv),
           "executor": args.executor,
           "host": {"cores": os.cpu_count(), "cpu": fp["cpu"], "python": platform.python_version(),
                    "torch": fp["torch"], "numerics": fp["id"]},
           "n": args.n, "workers": args.workers, "models": {}}
    for model in args.models:
        updates = args.updates_cnn if model == "cnn" else args.updates_resnet
        runs: dict[int, list] = {w: [] for w in args.workers}
        for r in range(args.rounds):
            order = args.workers if r % 2 == 0 else list(reversed(args.workers))
            for w in order:
                rec = run_once(scenario(model, args.n, updates, w, address))
                runs[w].append(rec)
                print(model, f"workers={w}", {k: v for k, v in rec.items() if k != "tables"}, flush=True)
        ref = runs[args.workers[0]][0]["tables"]
        same = all(rec["tables"] == ref for recs in runs.values() for rec in recs)
        for recs in runs.values():
            for rec in recs:
                rec.pop("tables")
        base = statistics.median(r["steady_updates_per_s"] for r in runs[args.workers[0]])
        out["models"][model] = {
            "updates": updates, "tables_identical": same,
            "runs": {str(w): recs for w, recs in runs.items()},
            "median_steady_updates_per_s": {str(w): round(statistics.median(r["steady_updates_per_s"] for r in recs), 2)
                                            for w, recs in runs.items()},
            "speedup_over_first": {str(w): round(statistics.median(r["steady_updates_per_s"] for r in recs) / base, 2)
                                   for w, recs in runs.items()}}
        if not same:
            print(f"{model}: tables differ between worker counts", file=sys.stderr)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(out, indent=1) + "\n")
    Path(args.out + ".md").write_text(markdown(out))
    return 0 if all(m["tables_identical"] for m in out["models"].values()) else 1


def markdown(out: dict) -> str:
    lines = [f"# Virtual clock: updates per wall second by worker count ({out['date']})", "",
             f"`{out['command']}` — executor {out['executor']}, {out['host']['cores']} cores, {out['host']['cpu']}, torch {out['host']['torch']}, "
             f"n = {out['n']} devices, ASGD; steady rate = updates between the 10 % and the last update per wall "
             "second (median of the alternated runs); load = 1-min load average before each run.", "",
             "| model | workers | steady updates/s | × first | CPU s (median) | load before (range) | tables |",
             "|---|---|---|---|---|---|---|"]
    for model, m in out["models"].items():
        for w, recs in m["runs"].items():
            loads = [r["load_before"][0] for r in recs]
            lines.append(f"| {model} | {w} | {m['median_steady_updates_per_s'][w]} | {m['speedup_over_first'][w]} | "
                         f"{statistics.median(r['cpu_s'] for r in recs):.2f} | {min(loads)}–{max(loads)} | "
                         f"{'identical' if m['tables_identical'] else 'DIFFER'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
