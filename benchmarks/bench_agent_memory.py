"""Memory per agent on the local runtime, per model: the resident set (RSS) and private memory (USS,
``Private_Clean + Private_Dirty`` of ``/proc/<pid>/smaps_rollup``) of each agent process of a short
``edgebed run`` (2 agents, ASGD, batch 10, ``numerics: native``, ``updates`` applied, ten times as
many for the fast cnn and mlp), sampled every 0.5 s while the agents live, the largest sample per
agent kept (an agent's memory grows over its first updates), the mean over the agents reported. Agents
are forked from the runtime's preloaded fork server, so their RSS counts pages they share with it
(the interpreter, torch); USS is what each added agent costs. Models and data as
benchmarks/bench_models.py (the image models on the bundled digits, the char-LSTMs on the licence
texts in LEAF's format).

    python -m benchmarks.bench_agent_memory [--updates 200] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.bench_docker_agents import smaps
from benchmarks.bench_models import MODELS, scenario
from benchmarks.zoo_runs import host

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "agent_memory.json"


def one(name: str, updates: int) -> dict:
    model, dataset, times = MODELS[name]
    updates *= times
    sc = scenario(model, dataset, updates)
    sc.update({"name": "agent-memory", "runtime": {"name": "local"}, "workers": {"n": 2},
               "stop": {"updates": updates, "wall_time": "5min"}})
    with tempfile.TemporaryDirectory(prefix="bench-agent-memory-") as tmp:
        out = Path(tmp)
        (out / "scenario.yaml").write_text(yaml.safe_dump(sc))
        proc = subprocess.Popen([sys.executable, "-m", "edgebed.cli", "run", str(out / "scenario.yaml"), "--out",
                                 str(out / "runs")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        peak: dict[int, dict] = {}
        while proc.poll() is None:
            time.sleep(0.5)
            runs = list((out / "runs").glob("*/pids.json")) if (out / "runs").is_dir() else []
            if not runs:
                continue
            for pid in json.loads(runs[0].read_text()).get("pids", []):
                m = smaps(pid)
                if m and m["rss"] > peak.get(pid, {}).get("rss", 0):
                    peak[pid] = m
        summary = json.loads(next((out / "runs").glob("*/summary.json")).read_text())
    mib = 1 << 20
    return {"model": model, "status": summary["status"], "updates": summary["updates"], "agents_sampled": len(peak),
            "rss_mib": round(sum(m["rss"] for m in peak.values()) / max(1, len(peak)) / mib, 1),
            "uss_mib": round(sum(m["uss"] for m in peak.values()) / max(1, len(peak)) / mib, 1),
            "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    doc = json.loads(OUT.read_text()) if OUT.is_file() else {"models": {}}
    doc.update({"what": " ".join(__doc__.split("\n\n")[0].split("\n")), "host": host(),
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    for name in MODELS:
        if args.only and name not in args.only:
            continue
        doc["models"][name] = one(name, args.updates)
        print(name, doc["models"][name], flush=True)
        doc["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
