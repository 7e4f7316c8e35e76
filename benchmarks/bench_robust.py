"""What ``security.robust`` (norm clipping, ps/robust.py) and the PS's harm count cost honest runs.

    .venv/bin/python benchmarks/bench_robust.py [--pushes 3000] [--updates 2000]
        → benchmarks/results/robust.json and robust.md

Two measures, each with the option off and on, same seed:

- **PS CPU per push**: ``ParameterServer.process`` on pushes of honest-looking values (normal, σ 0.01),
  no sockets, its thread's CPU time per push (thread_time: a busy host does not inflate it) — ASGD
  dense (mlp, 199,210 entries) and AdaComp sparse (c = 0.05), median of 3 rounds. Also with the harm
  count's norm replaced by a constant ("no harm norm"), which isolates what issue 51's per-device
  ‖ΔΘ‖₂ costs on the default path. Clipping runs on the general path (the short path is off with it).
- **Honest runs on the virtual clock**: 8 devices, mlp, ASGD / AdaComp / model averaging: final and
  best accuracy, updates, and updates per wall second of the whole simulation (PS, devices, evaluator).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from edgebed import wire  # noqa: E402
from edgebed.ps import aggregate  # noqa: E402
from edgebed.ps.rules import RULES  # noqa: E402
from edgebed.ps.server import Hooks, ParameterServer, PSConfig  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "robust.json"
N_PARAMS = 199_210
SIM = """
name: robust-{rule}-{tag}
seed: 7
dataset: {{train_samples: 4000, test_fraction: 0.1}}
model: {{name: mlp}}
algorithm: {algorithm}
workers: {{n: 8, classes: [{{name: default, share: 1.0, think_time: 20ms}}]}}
stop: {{updates: {updates}}}
eval: {{every: {every}, test_samples: 500}}
runtime: {{name: sim}}
{security}
"""
ALGORITHMS = {"asgd": ("{name: asgd, lr: 0.05}", 1), "adacomp": ("{name: adacomp, lr: 0.05, c: 0.05}", 1),
              "model-averaging": ("{name: model-averaging, lr: 0.05, local_steps: 10}", 10)}


def _cpu_per_push(rule: str, sparse: bool, pushes: int, clip, harm: bool) -> float:
    theta = (np.random.default_rng(0).normal(0, 0.05, N_PARAMS)).astype(np.float32)
    ps = ParameterServer(PSConfig(n_devices=4, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d),
                                  class_of=lambda d: "c", clip=clip), theta, RULES[rule](theta, 0.05),
                         Hooks(clock=lambda: (0.0, float("nan"))))
    sessions = [wire.decode(ps.process(b"p%d" % d, wire.encode(wire.Hello(d, "c", 0)))).session for d in range(4)]
    rng = np.random.default_rng(1)
    k = int(N_PARAMS * 0.05)
    real = aggregate.norm2
    if not harm:
        aggregate.norm2 = lambda v: 0.0
    try:
        total = 0.0
        for i in range(pushes):
            d = i % 4
            if sparse:
                idx = np.sort(rng.choice(N_PARAMS, k, replace=False)).astype(np.uint32)
                vals = rng.normal(0, 0.01, k).astype(np.float32)
            else:
                idx, vals = None, rng.normal(0, 0.01, N_PARAMS).astype(np.float32)
            frames = wire.encode(wire.Push(sessions[d], i, ps.version, vals, idx, 0.5))
            t0 = time.thread_time()
            ps.process(b"p%d" % d, frames)
            total += time.thread_time() - t0
    finally:
        aggregate.norm2 = real
    assert ps.version == pushes, (ps.version, ps.errors)
    return total / pushes * 1e6


def cpu(pushes: int) -> list[dict]:
    rows = []
    for rule, sparse in (("asgd", False), ("adacomp", True)):
        for label, clip, harm in (("off, no harm norm", None, False), ("off (default)", None, True),
                                  ("on (clip 1.5)", 1.5, True)):
            us = [_cpu_per_push(rule, sparse, pushes, clip, harm) for _ in range(3)]
            rows.append({"rule": rule, "push": "sparse c=0.05" if sparse else "dense", "robust": label,
                         "cpu_us_per_push": round(statistics.median(us), 1), "rounds_us": [round(u, 1) for u in us]})
            print(rows[-1], flush=True)
    return rows


def sim(updates: int) -> list[dict]:
    from edgebed.emulator.engine import Engine
    from edgebed.scenario import Scenario
    import yaml
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rule, (algorithm, per) in ALGORITHMS.items():
            for tag, security in (("off", ""), ("on", "security: {robust: {clip: 1.5}}")):
                n = max(updates // per, 50)
                text = SIM.format(rule=rule, tag=tag, algorithm=algorithm, updates=n, every=max(n // 4, 1),
                                  security=security)
                sc = Scenario.model_validate(yaml.safe_load(text))
                t0 = time.perf_counter()
                s = Engine(sc, Path(tmp)).run().summary
                wall = time.perf_counter() - t0
                rows.append({"rule": rule, "robust": tag, "status": s["status"], "updates": s["updates"],
                             "final_accuracy": s["final_accuracy"], "best_accuracy": s["best_accuracy"],
                             "wall_s": round(wall, 2), "updates_per_wall_s": round(s["updates"] / wall, 1),
                             "clipped_pushes": sum(s.get("harm", {}).get("clipped_pushes", {}).values())})
                print(rows[-1], flush=True)
    return rows


def markdown(r: dict) -> str:
    out = ["# security.robust: its cost on honest runs", "",
           f"`{r['command']}` on {r['host']} (load average {r['load'][0]:.1f} at the start).", "",
           "## PS CPU per push (process(), no sockets; median of 3 rounds)", "",
           "| rule | push | robust | CPU µs / push |", "|---|---|---|---:|"]
    out += [f"| {x['rule']} | {x['push']} | {x['robust']} | {x['cpu_us_per_push']} |" for x in r["cpu"]]
    out += ["", "\"no harm norm\": the per-device ‖ΔΘ‖₂ count (issue 51) replaced by a constant; \"off (default)\" "
            "is what every run pays now; \"on\" clips on the general push path.", "",
            "## Honest runs on the virtual clock (8 devices, mlp, seed 7)", "",
            "| rule | robust | status | updates | final accuracy | best accuracy | clipped pushes | updates / wall s |",
            "|---|---|---|---:|---:|---:|---:|---:|"]
    out += [f"| {x['rule']} | {x['robust']} | {x['status']} | {x['updates']} | {x['final_accuracy']:.4f} | "
            f"{x['best_accuracy']:.4f} | {x['clipped_pushes']} | {x['updates_per_wall_s']} |" for x in r["sim"]]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pushes", type=int, default=3000)
    ap.add_argument("--updates", type=int, default=2000)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    host = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    result = {"command": "benchmarks/bench_robust.py " + " ".join(sys.argv[1:]), "host": f"{os.cpu_count()} × {host}",
              "load": os.getloadavg(), "cpu": cpu(args.pushes), "sim": sim(args.updates)}
    result["load_end"] = os.getloadavg()
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
