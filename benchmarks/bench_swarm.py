"""Swarm runtime: devices per node and memory per device on the two-node test swarm.

    bash .ci/swarm-up && nice -n 10 python -m benchmarks.bench_swarm [--runs 8,16] [--out FILE]

Each run is a real `edgebed run` (subprocess) of the paper's CNN with AdaComp c = 0.01, b = 10, one
speed class with a 10 mbit uplink and 20 mbit downlink shaped by the link agents, on `runtime: swarm`
with ``max_per_node`` = n / 2 (so both nodes hold half), stopping after 3 updates per device (every
device pulled, trained and pushed). Both nodes are engines on this one host (``.ci/swarm-up``), so
memory is measured once for the whole swarm and split per node by the devices each holds:
  * host memory in use (MemTotal − MemAvailable) above the level before the run, peak: the run's whole
    cost — agents, task containers and their shims, the node engines' per-task state, PS, evaluator;
  * per agent process (the processes in each task's memory cgroup): RSS, PSS, USS from smaps_rollup,
    grouped by the node that holds the task (swarm.json).
Start-up: seconds until the runtime had every task placed, shaped and gated (the engine's ``start``
event), and until every device's first push. Results: benchmarks/results/swarm.json (+ .md).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from benchmarks.bench_docker_agents import mem_in_use, smaps

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "swarm.json"
ENV_FILE = Path("/run/edgebed-swarm/env")


def scenario(n: int, env: dict, updates: int) -> dict:
    return {"name": f"swarm-{n}", "seed": 1,
            "dataset": {"name": "mnist", "source": "bundled", "test_fraction": 0.2, "partition": "iid"},
            "model": {"name": "cnn"},
            "algorithm": {"name": "adacomp", "lr": 0.01, "batch_size": 10, "c": 0.01},
            "workers": {"n": n, "classes": [{"name": "edge", "share": 1, "uplink": {"rate": "10mbit"},
                                             "downlink": {"rate": "20mbit"}}]},
            "stop": {"updates": updates, "wall_time": "20min"},
            "eval": {"every": max(100, updates // 2), "test_samples": 500},
            "runtime": {"name": "swarm", "swarm": {"manager": env["MANAGER"], "nodes": [env["MANAGER"], env["WORKER"]],
                                                   "max_per_node": (n + 1) // 2}}}


def task_pids(run_dir: Path) -> dict[str, list[int]]:
    """Node id → pids of the processes in the run's task containers on that node."""
    try:
        rec = json.loads((run_dir / "swarm.json").read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, list[int]] = {}
    for d in rec.get("devices", {}).values():
        f = Path(f"/sys/fs/cgroup/memory/docker/{d['container']}/cgroup.procs")
        try:
            out.setdefault(d["node"], []).extend(int(x) for x in f.read_text().split())
        except OSError:
            pass
    return out


def one(n: int, env: dict, updates: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench-swarm-"))
    sc_path = out / "scenario.yaml"
    sc_path.write_text(yaml.safe_dump(scenario(n, env, updates)))
    base = mem_in_use()
    t0 = time.monotonic()
    log = open(out / "engine.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).with_name("edgebed")), "run", str(sc_path), "--out", str(out)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    peak, best, run_dir = 0, None, None
    while proc.poll() is None:
        time.sleep(2)
        if run_dir is None:
            found = [p for p in out.iterdir() if p.is_dir()]
            run_dir = found[0] if found else None
            continue
        used = mem_in_use() - base
        peak = max(peak, used)
        per_node = {node: [m for m in (smaps(p) for p in pids) if m] for node, pids in task_pids(run_dir).items()}
        sampled = sum(len(v) for v in per_node.values())
        if sampled and (best is None or (sampled, used) >= (best["sampled"], best["used"])):
            best = {"t_s": round(time.monotonic() - t0, 1), "sampled": sampled, "used": used, "per_node": per_node}
    wall = time.monotonic() - t0
    summary = json.loads((run_dir / "summary.json").read_text())
    rec = json.loads((run_dir / "swarm.json").read_text())
    ups = pd.read_csv(run_dir / "updates.csv")
    first = ups.groupby("device")["wall_time"].min()
    ev = pd.read_csv(run_dir / "events.csv")
    start = ev[ev.event == "start"]
    mib = 2 ** 20
    devices_per_node: dict[str, int] = {}
    for d in rec["devices"].values():
        devices_per_node[d["node"][:12]] = devices_per_node.get(d["node"][:12], 0) + 1
    res = {"devices": n, "status": summary["status"], "updates": summary["updates"], "wall_s": round(wall, 1),
           "devices_per_node": devices_per_node,
           "runtime_start_s": round(float(start.wall_time.iloc[0]), 1) if len(start) else None,
           "all_first_push_s": round(float(first.max()), 1) if first.size == n else None,
           "host_mem_peak_delta_mib": round(peak / mib), "host_mem_per_device_mib": round(peak / mib / n, 1),
           "fidelity": summary.get("fidelity", {}).get("verdict"),
           "cleanup": {k: len(v) for k, v in rec.get("cleanup", {}).items() if isinstance(v, list)},
           "run_dir": str(run_dir)}
    if best:
        res["agent_process_by_node"] = {
            node[:12]: {"processes": len(ms), **{f"{k}_mean_mib": round(sum(m[k] for m in ms) / len(ms) / mib, 1)
                                                 for k in ("rss", "pss", "uss")},
                        "pss_sum_mib": round(sum(m["pss"] for m in ms) / mib)}
            for node, ms in best["per_node"].items() if ms}
        res["agent_process_sampled_at_s"] = best["t_s"]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="8,16", help="comma-separated device counts")
    ap.add_argument("--updates-per-device", type=int, default=3)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--note", default="", help="conditions of the run (e.g. what else used the host)")
    args = ap.parse_args(argv)
    if not ENV_FILE.exists():
        sys.exit("no test swarm: run `bash .ci/swarm-up` (as root) first")
    env = dict(line.split("=", 1) for line in ENV_FILE.read_text().split())
    results = []
    for n in (int(x) for x in args.runs.split(",")):
        r = one(n, env, n * args.updates_per_device)
        print(json.dumps(r, indent=1), flush=True)
        results.append(r)
    doc = {"benchmark": "swarm", "date": time.strftime("%Y-%m-%d %H:%M %Z"),
           "host": {"cores": os.cpu_count(), "kernel": platform.release(),
                    "mem_total_gib": round(int(Path("/proc/meminfo").read_text().split()[1]) / 2**20, 1),
                    "loadavg_at_end": Path("/proc/loadavg").read_text().split()[:3]},
           "swarm": "two engines in their own network namespaces on this host (.ci/swarm-up)",
           "note": args.note, "results": results}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    md = ["| devices | devices per node | status | tasks shaped after | all pushed after | host memory (peak Δ) | "
          "per device | agent RSS / PSS / USS per node (mean) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        per = "; ".join(f"{k}: {v['rss_mean_mib']} / {v['pss_mean_mib']} / {v['uss_mean_mib']} MiB"
                        for k, v in r.get("agent_process_by_node", {}).items())
        md.append(f"| {r['devices']} | {', '.join(map(str, r['devices_per_node'].values()))} | {r['status']} "
                  f"({r['updates']} updates) | {r['runtime_start_s']} s | {r['all_first_push_s']} s | "
                  f"{r['host_mem_peak_delta_mib']} MiB | {r['host_mem_per_device_mib']} MiB | {per} |")
    Path(args.out).with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
