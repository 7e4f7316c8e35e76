"""Docker runtime at the paper's scale: 200 CNN device agents, one container (netns, shaped eth0,
cgroups) per device, comparing where the agent process lives.

    python -m benchmarks.bench_docker_agents [--runs forked:200,container:16,forked:16] [--out FILE]

Each run is a real `edgebed run` (subprocess) of the paper's CNN with AdaComp c = 0.01, b = 10, one
speed class with a 10 mbit tbf uplink, on `runtime: docker` with ``agents: container`` (the agent
imports torch inside its container) or ``agents: forked`` (the agent is forked from the
torch-preloaded fork server and enters its container's netns and cgroups). It stops after
``--updates`` updates (default: 3 per device), so every device has pulled, trained and pushed.

Measured while it runs (every 2 s):
  * host memory in use (MemTotal − MemAvailable) above the level before the run: the run's whole
    cost — agents, holders, PS, evaluator, dockerd's per-container state;
  * per agent process: RSS, PSS (shared pages divided among the sharers) and USS (private pages)
    from /proc/<pid>/smaps_rollup (forked mode: pids from docker.json; container mode: the
    processes in each container's cgroup);
Start-up: seconds from launch until every device's first push was applied (updates.csv), and the
runtime's own container set-up time. Results: benchmarks/results/docker_agents.json (+ .md).
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

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "docker_agents.json"


def scenario(n: int, agents: str, updates: int) -> dict:
    return {"name": f"docker-{agents}-{n}", "seed": 1,
            "dataset": {"name": "mnist", "source": "bundled", "test_fraction": 0.2, "partition": "iid"},
            "model": {"name": "cnn"},
            "algorithm": {"name": "adacomp", "lr": 0.01, "batch_size": 10, "c": 0.01},
            "workers": {"n": n, "classes": [{"name": "edge", "share": 1, "uplink": {"rate": "10mbit"}}]},
            "stop": {"updates": updates, "wall_time": "20min"},
            "eval": {"every": max(100, updates // 2), "test_samples": 500},
            "runtime": {"name": "docker", "docker": {"agents": agents, "start_parallel": 8}}}


def mem_in_use() -> int:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    kb = lambda k: int(info[k].split()[0]) * 1024  # noqa: E731
    return kb("MemTotal") - kb("MemAvailable")


def smaps(pid: int) -> dict | None:
    try:
        rows = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    except OSError:
        return None
    v = {r.split(":")[0]: int(r.split()[1]) * 1024 for r in rows}
    return {"rss": v.get("Rss", 0), "pss": v.get("Pss", 0),
            "uss": v.get("Private_Clean", 0) + v.get("Private_Dirty", 0)}


def agent_pids(run_dir: Path, agents: str) -> list[int]:
    try:
        rec = json.loads((run_dir / "docker.json").read_text())
    except (OSError, ValueError):
        return []
    pids = []
    for c in rec.get("containers", {}).values():
        if agents == "forked":
            if c.get("agent_pid"):
                pids.append(c["agent_pid"])
        elif c.get("id"):      # container mode: every process in the container's memory cgroup
            f = Path(f"/sys/fs/cgroup/memory/docker/{c['id']}/cgroup.procs")
            try:
                pids += [int(x) for x in f.read_text().split()]
            except OSError:
                pass
    return pids


def one(n: int, agents: str, updates: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench-docker-agents-"))
    sc_path = out / "scenario.yaml"
    sc_path.write_text(yaml.safe_dump(scenario(n, agents, updates)))
    base = mem_in_use()
    t0 = time.monotonic()
    log = open(out / "engine.log", "wb")
    proc = subprocess.Popen([str(Path(sys.executable).with_name("edgebed")), "run", str(sc_path), "--out", str(out)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    peak, best = 0, None      # best = the sample with the most live agents (then the largest sum)
    run_dir = None
    while proc.poll() is None:
        time.sleep(2)
        if run_dir is None:
            found = [p for p in out.iterdir() if p.is_dir()]
            run_dir = found[0] if found else None
            continue
        used = mem_in_use() - base
        peak = max(peak, used)
        per = [m for m in (smaps(p) for p in agent_pids(run_dir, agents)) if m]
        if per and (best is None or (len(per), used) >= (best["agents_sampled"], best["host_mem_delta"])):
            best = {"t_s": round(time.monotonic() - t0, 1), "agents_sampled": len(per), "host_mem_delta": used,
                    **{f"{k}_mean": sum(m[k] for m in per) / len(per) for k in ("rss", "pss", "uss")},
                    "pss_sum": sum(m["pss"] for m in per)}
    wall = time.monotonic() - t0
    summary = json.loads((run_dir / "summary.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    ups = pd.read_csv(run_dir / "updates.csv")
    first = ups.groupby("device")["wall_time"].min()
    mib = 2 ** 20
    res = {"agents": agents, "devices": n, "status": summary["status"], "updates": summary["updates"],
           "wall_s": round(wall, 1), "devices_pushed": int(first.size),
           "all_first_push_s": round(float(first.max()), 1) if first.size == n else None,
           "run_wall_time_s": summary.get("wall_time_s"),
           "host_mem_peak_delta_mib": round(peak / mib),
           "host_mem_per_device_mib": round(peak / mib / n, 1),
           "final_accuracy": summary.get("final_accuracy"),
           "ingress_bytes": summary.get("ingress_bytes"),
           "crashed_or_lost": summary["devices"]["crashed"] + summary["devices"]["lost"],
           "run_dir": str(run_dir)}
    if best:
        res["agent_process"] = {"sampled_at_s": best["t_s"], "agents_sampled": best["agents_sampled"],
                                **{f"{k}_mean_mib": round(best[f"{k}_mean"] / mib, 1) for k in ("rss", "pss", "uss")},
                                "pss_sum_mib": round(best["pss_sum"] / mib)}
    ev = pd.read_csv(run_dir / "events.csv")
    start = ev[ev.event == "start"]
    # the engine records "start" when runtime.start() returned: containers created, shaped, agents started
    res["runtime_start_s"] = round(float(start.wall_time.iloc[0]), 1) if len(start) else None
    res["docker"] = manifest["applied"].get("docker", {}).get("agents")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="forked:200,container:16,forked:16",
                    help="comma-separated agents:devices pairs")
    ap.add_argument("--updates-per-device", type=int, default=3)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--note", default="", help="conditions of the run (e.g. what else used the host)")
    args = ap.parse_args(argv)
    results = []
    for item in args.runs.split(","):
        agents, n = item.split(":")
        r = one(int(n), agents, int(n) * args.updates_per_device)
        print(json.dumps(r, indent=1), flush=True)
        results.append(r)
    doc = {"benchmark": "docker_agents", "date": time.strftime("%Y-%m-%d %H:%M %Z"),
           "host": {"cores": os.cpu_count(), "kernel": platform.release(),
                    "mem_total_gib": round(int(Path("/proc/meminfo").read_text().split()[1]) / 2**20, 1),
                    "loadavg_at_end": Path("/proc/loadavg").read_text().split()[:3]},
           "note": args.note, "results": results}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    md = ["| agents | devices | status | all devices pushed after | host memory (peak Δ) | per device | "
          "agent RSS / PSS / USS (mean) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        a = r.get("agent_process", {})
        md.append(f"| {r['agents']} | {r['devices']} | {r['status']} ({r['updates']} updates) | "
                  f"{r['all_first_push_s']} s | {r['host_mem_peak_delta_mib']} MiB | "
                  f"{r['host_mem_per_device_mib']} MiB | {a.get('rss_mean_mib')} / {a.get('pss_mean_mib')} / "
                  f"{a.get('uss_mean_mib')} MiB |")
    Path(args.out).with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
