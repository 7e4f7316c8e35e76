"""Fidelity of availability churn and the shared PS link: one scenario on the virtual clock (``sim``)
and on ``docker`` (containers killed and started, docker/churn.py; the PS's ingress a tbf behind an ifb,
docker/pslink.py), compared by what a user reads — updates per device, PS ingress, realised online
fraction, the shared link's utilisation — plus what only docker has: the agent's start-up after a
container comes back (``online`` → its ``hello``).

    .venv/bin/python benchmarks/churn_sim_vs_docker.py     # needs root and dockerd (bash .ci/provision)

The scenario is link-bound on purpose (ASGD's 0.8 MB MLP pushes on 4 mbit uplinks, four devices into a
6 mbit shared PS ingress), so the comparison is about the dynamics, not about unpaced compute. The
two runtimes draw the same churn schedule (stream (seed, device, 0xC1)). Writes
``benchmarks/results/churn_sim_vs_docker.{json,md}`` with the host's CPU and load during each run.
"""
from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fidelity_local_vs_sim import LoadSampler  # noqa: E402

SECONDS = 120
SCENARIO = {
    "name": "churn-fidelity", "seed": 11, "model": {"name": "mlp"},
    "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10},
    "eval": {"every": 1000, "test_samples": 200},
    "workers": {"n": 4, "classes": [{"name": "phone", "share": 1, "uplink": {"rate": "4mbit"},
                                     "downlink": {"rate": "20mbit"}}]},
    "dynamics": {"availability": {"classes": {"phone": {"online": {"dist": "exponential", "mean": "40s"},
                                                        "offline": {"dist": "constant", "mean": "15s"}}}},
                 "ps_link": {"ingress": "6mbit", "sample": "2s"}},
    "stop": {"wall_time": f"{SECONDS}s"},
}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def measure(path: Path, summary: dict) -> dict:
    from edgebed.emulator.dynamics_fidelity import realised_online
    from edgebed.rundir import read_table
    ev, ups = read_table(path, "events"), read_table(path, "updates")
    traffic = json.loads((path / "traffic.json").read_text())
    dyn = summary["fidelity"]["dynamics"]
    t_end = dyn["duration_s"]
    out = {"run_dir": str(path), "updates": int(len(ups)), "duration_s": t_end,
           "updates_per_device": {int(d): int(n) for d, n in ups["device"].value_counts().sort_index().items()},
           "ps_ingress_bytes": traffic["ingress_bytes"],
           "ingress_bytes_per_update": round(traffic["ingress_bytes"] / max(1, len(ups)), 1),
           "realised_online": {d: round(realised_online(ev, d, t_end), 4) for d in range(4)},
           "availability_verdict": dyn["availability"],
           "offline_events": int((ev["event"] == "offline").sum()), "online_events": int((ev["event"] == "online").sum()),
           "hellos": int((ev["event"] == "hello").sum())}
    rows = ev[ev["event"] == "ps-link"]["detail"]
    util = [float(dict(x.split("=") for x in d.split())["utilisation"]) for d in rows
            if "direction=ingress" in d]
    out["ps_link_ingress_utilisation_mean"] = round(sum(util) / len(util), 3) if util else None
    det = ev[ev["event"].isin(["offline", "online"])]["detail"].astype(str)
    late = det.str.extract(r"scheduled_s=([\d.]+) applied_s=([\d.]+)").dropna().astype(float)
    if len(late):
        out["churn_applied_late_s"] = {"mean": round(float((late[1] - late[0]).mean()), 3),
                                       "max": round(float((late[1] - late[0]).max()), 3)}
    rejoin = []
    for d in range(4):
        on = ev[(ev["device"] == d) & (ev["event"] == "online")]["wall_time"]
        hello = ev[(ev["device"] == d) & (ev["event"] == "hello")]["wall_time"]
        for t in on:
            later = hello[hello > t]
            if len(later):
                rejoin.append(float(later.iloc[0] - t))
    if rejoin and summary["runtime"] == "docker":
        out["rejoin_hello_after_online_s"] = {"mean": round(sum(rejoin) / len(rejoin), 2), "max": round(max(rejoin), 2),
                                              "n": len(rejoin)}
        first = ev[ev["event"] == "hello"].groupby("device")["wall_time"].min()
        start = ev[ev["event"] == "start"]["wall_time"].min()
        out["first_hello_after_start_s"] = round(float((first - start).mean()), 2)
    return out


def main() -> int:
    from edgebed.emulator.engine import Engine
    from edgebed.scenario import parse_scenario
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": {"cpu_model": cpu_model(), "cpus": __import__("os").cpu_count()},
               "scenario": SCENARIO, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="churn-fid-") as tmp:
        for runtime in ("sim", "docker"):
            sc = parse_scenario({**SCENARIO, "runtime": {"name": runtime}})
            with LoadSampler() as load:
                res = Engine(sc, out=Path(tmp) / runtime).run()
            m = measure(res.path, res.summary)
            m["status"], m["host_load"] = res.summary["status"], load.result()
            results["runs"][runtime] = m
            print(runtime, json.dumps(m, indent=1))
    out = ROOT / "benchmarks" / "results" / "churn_sim_vs_docker"
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    s, d = results["runs"]["sim"], results["runs"]["docker"]
    lines = ["# Churn and the shared PS link: sim vs docker", "",
             f"{results['date']}, {results['host']['cpu_model']} ({results['host']['cpus']} cores); "
             f"`benchmarks/churn_sim_vs_docker.py`; scenario in the JSON. {SECONDS} s of emulated time each.", "",
             "| | sim | docker |", "|:---|---:|---:|",
             f"| updates | {s['updates']} | {d['updates']} |",
             f"| updates per device | {s['updates_per_device']} | {d['updates_per_device']} |",
             f"| PS ingress (MB) | {s['ps_ingress_bytes'] / 1e6:.1f} | {d['ps_ingress_bytes'] / 1e6:.1f} |",
             f"| ingress per update (kB) | {s['ingress_bytes_per_update'] / 1e3:.1f} | {d['ingress_bytes_per_update'] / 1e3:.1f} |",
             f"| realised online per device | {s['realised_online']} | {d['realised_online']} |",
             f"| offline / online events | {s['offline_events']} / {s['online_events']} | {d['offline_events']} / {d['online_events']} |",
             f"| PS ingress link utilisation (mean of 2 s windows) | {s['ps_link_ingress_utilisation_mean']} | {d['ps_link_ingress_utilisation_mean']} |",
             f"| churn applied late (s, mean / max) | exact | {d.get('churn_applied_late_s')} |",
             f"| hello after a container started again (s) | 0 | {d.get('rejoin_hello_after_online_s')} |",
             f"| first hello after the agents started (s) | 0 | {d.get('first_hello_after_start_s')} |",
             f"| host load1 mean (max) | {s['host_load']['load1_mean']} ({s['host_load']['load1_max']}) | "
             f"{d['host_load']['load1_mean']} ({d['host_load']['load1_max']}) |", ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
