"""Per-model cost on the virtual clock: parameters, the sim's rate and memory per device, for the
paper's networks (cnn, mlp) and the zoo (resnet20 at two sizes, mobilenet-small, char-lstm).

Rate: applied updates per CPU second of the sim process (ASGD, 10 devices, batch 10, one torch
thread, ``numerics: native`` for every model). Each model runs in a fresh child process three times
on the same data: a warm-up of 10 updates (imports, first allocations), then ``short`` and
``short + steps`` updates (ten times as many for the fast cnn and mlp); rate = ``steps`` / (CPU of the long run − CPU of the short run), so the
start-up, data loading, step-time calibration and the final evaluation, the same in both, cancel.
The CPU is the child's own (``time.process_time``: every thread of the process).

Memory per device: the capacity model's per-device bytes on the virtual clock
(``edgebed.emulator.capacity.sim_memory(...)["per_device"]``, a model from |Θ|, not a
measurement), for ASGD (a dense gradient held) and AdaComp c = 0.01 (a selection held), and its
base bytes; beside them the child's measured peak resident set (``ru_maxrss``) over its three runs
of 10 devices, which holds the interpreter, torch, the data set, the PS and evaluator as well.

FLOPs per step are torch's ``FlopCounterMode`` count, which leaves out LSTM cells (the char-LSTM's
figure is its embedding and linear layer only).

Image models train on the bundled MNIST digits (1×28×28, the same shape as Fashion-MNIST); the
char-LSTM on the licence texts in LEAF's format (benchmarks/make_leaf_text.py; not Shakespeare).

    python -m benchmarks.bench_models [--steps 300] [--only NAME ...] [--out benchmarks/results/models.json]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import make_leaf_text
from benchmarks.zoo_runs import host

ROOT = Path(__file__).resolve().parents[1]
LEAF = Path("~/.cache/edgebed/licences-leaf").expanduser()
IMAGE = {"name": "mnist"}
TEXT = {"format": "leaf", "path": str(LEAF / "train"), "test_path": str(LEAF / "test"), "partition": "iid"}

MODELS = {
    "cnn": ({"name": "cnn"}, IMAGE, 10),
    "mlp": ({"name": "mlp"}, IMAGE, 10),
    "resnet8-w8": ({"name": "resnet20", "args": {"depth": 8, "width": 8, "in_channels": 1, "size": 28}}, IMAGE, 1),
    "resnet20-w16": ({"name": "resnet20", "args": {"depth": 20, "width": 16, "in_channels": 1, "size": 28}}, IMAGE, 1),
    "mobilenet-small": ({"name": "mobilenet-small", "args": {"in_channels": 1, "size": 28}}, IMAGE, 1),
    "mobilenet-small-w0.25": ({"name": "mobilenet-small", "args": {"width": 0.25, "in_channels": 1, "size": 28}},
                              IMAGE, 1),
    "char-lstm": ({"name": "char-lstm"}, TEXT, 1),
    "char-lstm-h128": ({"name": "char-lstm", "args": {"hidden": 128}}, TEXT, 1),
}


def scenario(model: dict, dataset: dict, updates: int, algorithm: str = "asgd") -> dict:
    algo = {"name": algorithm, "lr": 0.05, "batch_size": 10, **({"c": 0.01} if algorithm == "adacomp" else {})}
    return {"name": "bench-models", "seed": 1, "dataset": dataset, "model": model, "algorithm": algo,
            "workers": {"n": 10}, "stop": {"updates": updates}, "eval": {"every": 100_000, "test_samples": 200},
            "numerics": "native", "timing": {"step_time": "10ms"},
            "runtime": {"name": "sim", "sim": {"max_batch": 1, "threads": 1}}}


def child(name: str, short: int, steps: int) -> dict:
    """In a fresh process: parameters, FLOPs, the rate, the capacity model's bytes, the peak RSS."""
    from edgebed.emulator.capacity import sim_memory
    from edgebed.emulator.engine import Engine
    from edgebed.scenario import parse_scenario
    from edgebed.workload import num_params, step_flops
    model, dataset, times = MODELS[name]
    short, steps = short * times, steps * times
    cpu = {}
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        for n in (10, short, short + steps):
            t = time.process_time()
            run = Engine(parse_scenario(scenario(model, dataset, n)), Path(tmp)).run()
            assert run.summary["status"] == "complete" and run.summary["updates"] == n, run.summary
            cpu[n] = time.process_time() - t
    asgd = parse_scenario(scenario(model, dataset, 10))
    ada = parse_scenario(scenario(model, dataset, 10, "adacomp"))
    d_cpu = cpu[short + steps] - cpu[short]
    return {"model": model, "dataset": dataset.get("name") or dataset["format"],
            "parameters": num_params(asgd.model), "mflop_per_step_b10": round(step_flops(asgd.model, 10) / 1e6, 1),
            "cpu_s": {str(k): round(v, 2) for k, v in cpu.items()},
            "steps": steps, "updates_per_cpu_s": round(steps / d_cpu, 1), "cpu_ms_per_update": round(1e3 * d_cpu / steps, 2),
            "capacity_per_device_bytes": {"asgd": sim_memory(asgd)["per_device"],
                                          "adacomp_c0.01": sim_memory(ada)["per_device"]},
            "capacity_base_bytes": sim_memory(asgd)["base"],
            "peak_rss_mib_10_devices": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def table(doc: dict) -> str:
    rows = ["| model | parameters | MFLOP/step (b = 10) | updates per CPU-s | CPU ms/update | "
            "per device, ASGD (capacity model) | per device, AdaComp c = 0.01 | peak RSS, sim, 10 devices |",
            "|---|---|---|---|---|---|---|---|"]
    for name, r in doc["models"].items():
        per = r["capacity_per_device_bytes"]
        rows.append(f"| {name} | {r['parameters']:,} | {r['mflop_per_step_b10']} | {r['updates_per_cpu_s']} | "
                    f"{r['cpu_ms_per_update']} | {per['asgd'] / 1024:.0f} KiB | {per['adacomp_c0.01'] / 1024:.0f} KiB | "
                    f"{r['peak_rss_mib_10_devices']} MiB |")
    h = doc["host"]
    return ("# Per-model cost on the virtual clock\n\n" + doc["what"] + "\n\n" + "\n".join(rows) + "\n\n"
            f"Host: {h['cpu']}, {h['cores']} cores, load average {h['load_average']} at the start, "
            f"{doc['load_average_end']} at the end (started {doc['date']}). Written by benchmarks/bench_models.py.\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300, help="updates between the short and the long run")
    ap.add_argument("--short", type=int, default=50)
    ap.add_argument("--only", nargs="*", help="model names to run (default all)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "models.json"))
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.short, args.steps)))
        return 0
    if not (LEAF / "train").exists():
        make_leaf_text.make(Path(make_leaf_text.SOURCE), LEAF)
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else {"models": {}}
    doc.update({"what": " ".join(p.replace("\n", " ") for p in __doc__.split("\n\n")[1:4]),
                "steps": args.steps, "short": args.short, "host": host(),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in MODELS:
        if args.only and name not in args.only:
            continue
        p = subprocess.run([sys.executable, "-m", "benchmarks.bench_models", "--child", name, "--short",
                            str(args.short), "--steps", str(args.steps)], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=True)
        doc["models"][name] = {**json.loads(p.stdout.strip().splitlines()[-1]),
                               "load_average_after": [round(v, 2) for v in os.getloadavg()],
                               "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        print(name, doc["models"][name], flush=True)
        doc["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
        out.write_text(json.dumps(doc, indent=1) + "\n")
        out.with_suffix(".md").write_text(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
