"""Clean-up of a swarm run: its services, overlay network and configs (through the manager), then on
every node its task containers and whatever qdiscs still sit in their namespaces (through the node's
engine). Only objects labelled ``edgebed.run=<run id>`` (recorded in ``swarm.json``) are touched."""
from __future__ import annotations

import time
from typing import Optional

GONE_WAIT = 30.0     # seconds the nodes get to remove a removed service's task containers


def _client(url: str):
    from ..docker import engine
    return engine.client(url)


def _listed(client, label: str) -> list:
    try:
        return client.containers.list(all=True, sparse=True, filters={"label": label})
    except Exception:
        return []


def clean_swarm(record: dict, manager=None) -> dict:
    """Remove what run ``record`` (swarm.json) created on the swarm; returns what was removed."""
    label = record["label"]
    report: dict = {"services": [], "networks": [], "configs": [], "containers": [], "qdiscs": [], "errors": []}
    try:
        mgr = manager or _client(record["manager"]["endpoint"])
    except Exception as err:
        report["errors"].append(f"swarm manager not reachable: {err}")
        return report
    for svc in mgr.services.list(filters={"label": label}):
        try:
            svc.remove()
            report["services"].append(svc.name)
        except Exception as err:
            report["errors"].append(f"service {svc.name}: {err}")
    nodes = []
    for n in record.get("nodes", {}).values():
        try:
            nodes.append(_client(n["endpoint"]))
        except Exception as err:
            report["errors"].append(f"node engine {n['endpoint']} not reachable: {err}")
    # a removed service's containers are stopped and removed by their nodes; wait for that, then
    # remove what is left (a paused container ignores the stop). Sparse listings: a full one inspects
    # each container and fails on one removed in between.
    deadline = time.monotonic() + GONE_WAIT
    while any(_listed(n, label) for n in nodes) and time.monotonic() < deadline:
        time.sleep(0.5)
    for n in nodes:
        for c in _listed(n, label):
            try:
                c.remove(force=True)
                report["containers"].append(c.id[:12])
            except Exception as err:
                if "No such container" not in str(err):
                    report["errors"].append(f"container {c.id[:12]}: {err}")
    for kind, coll in (("networks", mgr.networks), ("configs", mgr.configs)):
        for obj in coll.list(filters={"label": label}):
            for attempt in range(20):          # the overlay detaches from its last task a moment later
                try:
                    obj.remove()
                    report[kind].append(obj.name)
                    break
                except Exception as err:
                    if attempt == 19:
                        report["errors"].append(f"{kind[:-1]} {obj.name}: {err}")
                    time.sleep(0.5)
    for n in nodes:
        n.close()
    return report


def leftovers(record: dict, manager=None) -> dict:
    """What of the run still exists on the swarm: services, networks, configs, and per node the
    task containers (all empty when clean)."""
    label = record["label"]
    mgr = manager or _client(record["manager"]["endpoint"])
    out = {"services": [s.name for s in mgr.services.list(filters={"label": label})],
           "networks": [n.name for n in mgr.networks.list(filters={"label": label})],
           "configs": [c.name for c in mgr.configs.list(filters={"label": label})], "containers": {}}
    for node_id, n in record.get("nodes", {}).items():
        cli = _client(n["endpoint"])
        try:
            found = [c.id[:12] for c in cli.containers.list(all=True, sparse=True, filters={"label": label})]
        finally:
            cli.close()
        if found:
            out["containers"][node_id] = found
    return out


def describe(report: Optional[dict]) -> str:
    if not report:
        return ""
    return (f"swarm: removed {len(report.get('services', []))} services, {len(report.get('networks', []))} "
            f"networks, {len(report.get('configs', []))} configs, {len(report.get('containers', []))} "
            f"left-over containers, {len(report.get('qdiscs', []))} qdiscs")
