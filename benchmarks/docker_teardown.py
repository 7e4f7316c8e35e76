"""Docker teardown at scale: does a run's network outlive its containers ("has active endpoints")?

    python -m benchmarks.docker_teardown [--counts 50,100,200] [--orders attached,detached] [--out FILE]

Per count and order: N device containers as ``agents: forked`` makes them (holder process, tbf-shaped
links), a host process inside each container's network namespace (a stand-in for the forked agent,
without torch's memory), every tenth container paused (a crashed device), the host processes killed,
then the teardown:
  attached  the order before issue 29: containers force-removed 8 at a time while still attached,
            then the network removed once;
  detached  ``cleanup.clean_docker``: each container disconnected, then removed; the network removed
            last with backoff and stale endpoints force-deleted by name.
Recorded: seconds of each phase, pause failures, errors, and what of the run was left.
Results go to benchmarks/results/docker_teardown.json. Only this benchmark's labelled objects are touched.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from edgebed.emulator.runtimes.docker import clean as cleanup
from edgebed.emulator.runtimes.base import AgentSpec
from edgebed.emulator.runtimes.docker import images
from edgebed.emulator.runtimes.docker.runtime import DockerRuntime
from edgebed.scenario import parse_scenario


def _attached_teardown(rt) -> dict:
    """The pre-fix order: force-remove every container (8 in parallel) while attached, then the network."""
    label = f"edgebed.run={rt.run_id}"
    errors = []
    found = rt.client.containers.list(all=True, sparse=True, filters={"label": label})

    def remove(c):
        try:
            c.remove(force=True)
        except Exception as err:
            errors.append(f"container {c.id[:12]}: {err}")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(remove, found))
    for n in rt.client.networks.list(filters={"label": label}):
        try:
            n.remove()
        except Exception as err:
            errors.append(f"network {n.name}: {err}")
    return {"errors": errors}


def one(n: int, order: str, root: Path) -> dict:
    sc = parse_scenario({
        "name": "teardown", "seed": 1, "model": {"name": "mlp"},
        "workers": {"n": n, "classes": [{"name": "a", "share": 1.0, "uplink": {"rate": "10mbit"},
                                          "downlink": {"rate": "10mbit"}}]},
        "stop": {"updates": 10}, "runtime": {"name": "docker", "docker": {"agents": "forked", "start_parallel": 8}}})
    run = root / f"teardown{n}{order}-{time.strftime('%Y%m%d-%H%M%S')}"
    run.mkdir()
    rt = DockerRuntime(sc, run)
    row: dict = {"containers": n, "order": order}
    holders = []
    try:
        t = time.monotonic()
        rt._ensure_network()
        rt.image = images.resolve(None, rt.client)
        rt.gate_dir.mkdir(exist_ok=True)
        with ThreadPoolExecutor(8) as pool:
            rt.handles = list(pool.map(rt._start_one, [AgentSpec(d, "a", "tcp://127.0.0.1:1") for d in range(n)]))
        row["start_s"] = round(time.monotonic() - t, 1)
        for d in range(n):
            pid = rt.record["containers"][str(d)]["pid"]
            holders.append(subprocess.Popen(["nsenter", f"--net=/proc/{pid}/ns/net", "--", "sleep", "600"]))
        row["pause_failures"] = 0
        for h in rt.handles[::10]:
            try:
                h.container.pause()
            except Exception:
                row["pause_failures"] += 1
        for p in holders:
            p.kill()
            p.wait(10)
        t = time.monotonic()
        if order == "attached":
            row["errors"] = _attached_teardown(rt)["errors"]
        else:
            report = cleanup.clean_docker(rt.run_id, client=rt.client, record=rt.record)
            row["errors"] = report["errors"]
        row["teardown_s"] = round(time.monotonic() - t, 1)
        row["left"] = cleanup.leftovers(rt.run_id, rt.client)
    finally:
        for p in holders:
            if p.poll() is None:
                p.kill()
        if any(cleanup.leftovers(rt.run_id, rt.client).values()):
            cleanup.clean_docker(rt.run_id, client=rt.client, record=rt.record)
            row["left_after_clean"] = cleanup.leftovers(rt.run_id, rt.client)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="50,100,200")
    ap.add_argument("--orders", default="attached,detached")
    ap.add_argument("--out", default="benchmarks/results/docker_teardown.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgebed-teardown-") as tmp:
        rows = [one(int(n), order, Path(tmp)) for n in args.counts.split(",") for order in args.orders.split(",")]
    out = {"benchmark": "docker_teardown", "host": {"cores": os.cpu_count(), "kernel": platform.release(),
                                                     "loadavg_at_end": list(map(float, os.getloadavg()))},
           "docker": __import__("docker").from_env().version().get("Version"),
           "note": "shared host: other workloads ran concurrently; times are upper bounds", "results": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
