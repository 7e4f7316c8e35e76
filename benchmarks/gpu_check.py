"""GPU check: ``device: cuda`` end to end, in a few minutes, on a machine with a CUDA device.

    python -m benchmarks.gpu_check [--out benchmarks/results/gpu_check.json] [--no-spark]

Runs, each to its stop, on the first GPU: (1) the virtual clock with the paper's CNN, 8 devices, ASGD,
600 updates, once with ``device: cuda`` and once with ``device: cpu`` (the same seed: the accuracies
should agree within a point or two — the GPU's kernels sum in another order, so not bit for bit);
(2) the virtual clock with a ResNet-50-sized model (``tests.sized_models:mlp_25m``, 25.6 M parameters,
dense pushes of 102 MB) on cuda, 2 devices, 10 updates; (3) if pyspark and Java are there, the Spark
runtime's GPU mode (``local-cluster[1,2,2048]``, ``gpus_per_task: 0.5``: two tasks share the GPU,
found by Spark's nvidia-smi discovery script) with ``device: cuda``, 2 devices, 200 updates. Writes
status, updates, final accuracy and wall seconds per run, the GPU's name and torch's CUDA version to
``--out``. Exit status 0 when every run completed, 1 otherwise; 2, with a message and nothing written,
where torch sees no CUDA device.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "gpu_check.json"


def no_cuda() -> str | None:
    """Why this machine can't run the check (None: it can)."""
    import torch
    if torch.cuda.is_available():
        return None
    built = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return (f"gpu_check: no CUDA device: torch {torch.__version__} ({built}) sees none "
            "(torch.cuda.is_available() is False). Run it on a machine with an NVIDIA GPU and a CUDA build "
            "of torch; nothing was written.")


def scenario(name: str, device: str, model: str = "cnn", n: int = 8, updates: int = 600,
             runtime: dict | None = None) -> dict:
    return {"name": name, "seed": 1, "device": device,
            "model": {"name": model, **({"path": str(ROOT)} if ":" in model else {})},
            "dataset": {"train_samples": 4000}, "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
            "workers": {"n": n}, "stop": {"updates": updates, "wall_time": "4min"},
            "eval": {"every": updates, "test_samples": 1000}, "runtime": runtime or {"name": "sim"}}


def run(data: dict) -> dict:
    """One run to its stop; what it ended with."""
    from edgebed.emulator.engine import Engine
    from edgebed.scenario import parse_scenario
    sc = parse_scenario(data)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = Engine(sc, out=tmp).run()
        s = res.summary
    row = {"name": data["name"], "device": data["device"], "runtime": data["runtime"]["name"],
           "model": data["model"]["name"], "devices": data["workers"]["n"], "status": s["status"],
           "updates": s["updates"], "final_accuracy": s.get("final_accuracy"),
           "wall_s": round(time.perf_counter() - t0, 1)}
    print(json.dumps(row), flush=True)
    return row


def spark_missing() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'edgebed[spark]')"
    return None if shutil.which("java") else "no java on PATH (Spark needs a JRE)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark GPU mode")
    args = ap.parse_args(argv)
    why = no_cuda()
    if why:
        print(why, file=sys.stderr)
        return 2
    import torch
    sys.path.insert(0, str(ROOT))   # tests.sized_models, for the engine and its processes
    rec = {"date": time.strftime("%Y-%m-%d %H:%M"), "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "cuda": torch.version.cuda, "cores": os.cpu_count(),
           "load_average_start": os.getloadavg(), "runs": []}
    rec["runs"].append(run(scenario("gpu-sim-cnn", "cuda")))
    rec["runs"].append(run(scenario("cpu-sim-cnn", "cpu")))
    rec["runs"].append(run(scenario("gpu-sim-25m", "cuda", "tests.sized_models:mlp_25m", n=2, updates=10)))
    missing = "skipped (--no-spark)" if args.no_spark else spark_missing()
    if missing:
        rec["spark"] = missing
    else:
        spark = {"name": "spark", "spark": {"master": "local-cluster[1,2,2048]", "gpus_per_task": 0.5}}
        rec["runs"].append(run(scenario("gpu-spark-cnn", "cuda", n=2, updates=200, runtime=spark)))
    rec["load_average_end"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(rec, indent=2) + "\n")
    print(f"written {args.out}")
    return 0 if all(r["status"] == "complete" for r in rec["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
