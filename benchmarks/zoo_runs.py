"""Committed runs of the three zoo models to a stated accuracy: every scenario under scenarios/zoo/.

Runs each on the virtual clock (as its file says), keeps its compact result (scenario.yaml,
summary.json, evals.csv: ``edgebed.analysis.compact``) under ``benchmarks/results/zoo_runs/<name>/``
and writes ``benchmarks/results/zoo_runs.json``: per run the model, its parameters, the data set and
partition, the final and best test accuracy, the accuracy at each evaluation, and the run's CPU
seconds (this process's, one torch thread) with the host's CPU and load. The char-LSTM's data set is
written first by ``benchmarks/make_leaf_text.py`` when missing (licence texts, not Shakespeare).

    python -m benchmarks.zoo_runs [--only NAME ...] [--out benchmarks/results/zoo_runs.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import make_leaf_text

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "scenarios" / "zoo"


def host() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "load_average": [round(v, 2) for v in os.getloadavg()]}


def run_one(path: Path, runs: Path, dest: Path) -> dict:
    """Run the scenario at ``path``; its compact result into ``dest``; the record for zoo_runs.json."""
    from edgebed.analysis.compact import write_compact
    from edgebed.emulator.engine import Engine
    from edgebed.rundir import read_table
    from edgebed.scenario import load_scenario
    from edgebed.workload import num_params
    sc = load_scenario(path)
    if sc.dataset.format == "leaf" and not Path(sc.dataset.path).expanduser().exists():
        out = Path(sc.dataset.path).expanduser().parent
        made = make_leaf_text.make(Path(make_leaf_text.SOURCE), out)
        print(f"{out}: wrote {len(made['users'])} users", flush=True)
    load, cpu, wall = os.getloadavg(), time.process_time(), time.monotonic()
    run = Engine(sc, runs).run()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    write_compact(run.path, dest)
    evals = read_table(run.path, "evals").sort_values("update")
    s = run.summary
    return {"scenario": str(path.relative_to(ROOT)), "compact": str(dest.relative_to(ROOT)),
            "model": sc.model.name, "model_args": dict(sc.model.args), "parameters": num_params(sc.model),
            "dataset": {"format": sc.dataset.format, "name": sc.dataset.name, "path": sc.dataset.path,
                        "partition": sc.dataset.partition, "alpha": sc.dataset.alpha},
            "algorithm": sc.algorithm.name, "devices": sc.workers.n, "status": s["status"],
            "updates": s["updates"], "final_accuracy": s["final_accuracy"], "best_accuracy": s["best_accuracy"],
            "accuracy_at": [[int(u), round(float(a), 4)] for u, a in zip(evals["update"], evals["accuracy"])],
            "test_samples": sc.eval.test_samples, "cpu_s": round(cpu, 1), "wall_s": round(wall, 1),
            "load_average_start": [round(v, 2) for v in load]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="scenario names (file stems) to run; default all")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "zoo_runs.json"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"runs": {}}
    doc.update({"what": "the zoo's models trained on the virtual clock to the accuracy recorded here "
                        "(scenarios/zoo/*.yaml; compact results under benchmarks/results/zoo_runs/); "
                        "cpu_s: CPU seconds of the run in this process (start-up, evaluations included)",
                "char_lstm_data": "NOT Shakespeare: Debian's licence texts (/usr/share/common-licenses) in "
                                  "LEAF's Shakespeare JSON, one user per licence, by benchmarks/make_leaf_text.py",
                "host": host(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    with tempfile.TemporaryDirectory(prefix="zoo-runs-") as tmp:
        for path in sorted(ZOO.glob("*.yaml")):
            if args.only and path.stem not in args.only:
                continue
            rec = run_one(path, Path(tmp), out.parent / "zoo_runs" / path.stem)
            doc["runs"][path.stem] = rec
            print(f"{path.stem}: {rec['status']}, {rec['updates']} updates, final {rec['final_accuracy']:.4f}, "
                  f"best {rec['best_accuracy']:.4f}, {rec['cpu_s']} CPU-s", flush=True)
            out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
