"""What a study executor costs per cell, and a smoke study's wall time locally vs on Ray at two workers.

1. Scheduling overhead: ``--tasks`` tasks that do nothing (``_nothing``: return their argument)
   submitted together through each executor — local in-process, local with 2 processes (a fresh
   spawned process per task), a private Ray of 2 CPUs on this machine (``max_calls=1``: a fresh
   worker process per task, as for cells), the one-node SLURM of ``.ci/provision`` (one job array
   through submitit) — wall time from the first submit to the last result, divided by the number of
   tasks; plus one task alone (the latency a single cell × seed pays before and after its own run).
   Start-up (``ray.init``) is timed apart.
2. A smoke study (``tests/integration/study_cells.py``: MLP, sim runtime, 2 cells × 2 seeds, 300
   updates) end to end with ``run_study``: local in-process (one at a time), local ``--jobs 2``, Ray
   at two workers. Each cell trains on one thread.

The host is shared (load average recorded with the results); numbers are wall time. Results:
``benchmarks/results/executors.json``.

    nice -n 10 .venv/bin/python -m benchmarks.bench_executors [--tasks 20] [--skip-slurm]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from concurrent.futures import wait
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "executors.json"


def _nothing(x):
    return x


def overhead(make, tasks: int) -> dict:
    t0 = time.perf_counter()
    ex = make()
    startup = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        f = ex.submit(_nothing, -1)
        f.result(timeout=600)
        single = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ex.batch():
            futs = [ex.submit(_nothing, i) for i in range(tasks)]
        wait(futs, timeout=1200)
        assert [f.result() for f in futs] == list(range(tasks))
        bulk = time.perf_counter() - t0
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    return {"startup_s": round(startup, 3), "one_task_s": round(single, 3),
            "tasks": tasks, "bulk_s": round(bulk, 3), "per_task_s": round(bulk / tasks, 4)}


def smoke(executor_factory, root: Path, label: str) -> dict:
    from edgebed.study.runner import load_study, run_study
    from tests.integration.study_cells import write_smoke_study
    path = write_smoke_study(root / label / "study", updates=300, seeds=2)
    t0 = time.perf_counter()
    ex = executor_factory()
    try:
        status = run_study(load_study(path), root / label / "out", executor=ex)
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    wall = time.perf_counter() - t0
    assert status["complete"] == 4, status["cells"]
    cells = [e["wall_time_s"] for e in status["cells"]]
    return {"wall_s": round(wall, 1), "runs": 4, "median_cell_s": round(statistics.median(cells), 2),
            "cells_s": cells}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--skip-slurm", action="store_true")
    args = ap.parse_args(argv)
    from edgebed import numerics
    os.environ.update(numerics.environment("portable"))
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # the private Ray on loopback
    from edgebed.study.executors import LocalExecutor, RayExecutor, Resources, SlurmExecutor
    from edgebed.study.executors.slurm_executor import slurm_problem

    root = Path(tempfile.mkdtemp(prefix="edgebed-bench-exec-"))
    out: dict = {"host": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "loadavg_before": os.getloadavg()}}
    import ray
    out["host"]["ray"] = ray.__version__
    if not args.skip_slurm:
        problem = slurm_problem()
        if problem:
            raise SystemExit(f"slurm: {problem}; run `bash .ci/provision` or pass --skip-slurm")
    makers = {"local in-process": lambda: LocalExecutor(1),
              "local, 2 processes (one per task)": lambda: LocalExecutor(2),
              "ray (private, 2 CPUs)": lambda: RayExecutor(None, Resources(cpus=1))}
    if not args.skip_slurm:
        makers["slurm (one node, job array)"] = lambda: SlurmExecutor(root / "slurm-overhead", time_min=10)
    over = out["scheduling_overhead"] = {}
    for name, make in makers.items():
        over[name] = overhead(make, args.tasks)
        print(name, json.dumps(over[name]), flush=True)
    study = out["smoke_study"] = {}
    for name, make, label in (("local in-process (1 at a time)", lambda: LocalExecutor(1), "local1"),
                              ("local --jobs 2", lambda: LocalExecutor(2), "local2"),
                              ("ray, 2 workers", lambda: RayExecutor(None, Resources(cpus=1)), "ray2")):
        study[name] = smoke(make, root, label)
        print(name, json.dumps(study[name]), flush=True)
    out["smoke_study_setup"] = ("tests/integration/study_cells.py write_smoke_study: MLP, sim runtime, "
                                "4 devices, 320 training samples, 300 updates, 2 cells x 2 seeds")
    out["host"]["loadavg_after"] = os.getloadavg()
    out["when"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
