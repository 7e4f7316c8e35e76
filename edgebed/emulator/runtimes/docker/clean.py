"""Docker clean-up: remove the containers, networks and qdiscs one run labelled and recorded.

``emulator/cleanup.py`` (``edgebed clean``) calls in here for a run's ``docker.json``; the runtime calls
``clean_docker`` at its own teardown. Only objects carrying ``edgebed.run=<run id>`` are touched.
"""
from __future__ import annotations

import os
import re
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from . import links

RUN_LABEL = "edgebed.run"            # = images.LABEL + ".run"
RUN_DIR_LABEL = "edgebed.run_dir"


def run_id_of(run_dir: Path) -> str:
    """Docker-safe id of a run, from its directory name (unique per run: name + timestamp)."""
    rid = re.sub(r"[^a-zA-Z0-9_.-]", "-", Path(run_dir).resolve().name).strip("-.") or "run"
    return rid[:48]


def _kill_forked_agents(record: dict) -> list[int]:
    """SIGKILL the host processes of ``agents: forked`` devices that are still alive. A pid is only
    killed if it is still inside its container's cgroup (so a reused pid is never hit); a paused
    container is thawed by its removal, which delivers the kill."""
    killed = []
    for c in record.get("containers", {}).values():
        pid, cid = c.get("agent_pid"), c.get("id")
        if not pid or not cid:
            continue
        try:
            if cid not in Path(f"/proc/{pid}/cgroup").read_text():
                continue
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (OSError, ProcessLookupError):
            continue
    return killed


def clean_docker(run_id: str, client=None, record: Optional[dict] = None) -> dict:
    """Remove the containers and networks labelled ``edgebed.run=<run_id>`` and any edgebed qdisc left
    on the host-side veths listed in ``record`` (docker.json). Returns what was removed."""
    label = f"edgebed.run={run_id}"
    report = {"containers": [], "networks": [], "qdiscs": [], "errors": []}
    if client is None:
        import docker
        client = docker.from_env(timeout=120)
    report["agents"] = _kill_forked_agents(record or {})
    def remove(c):
        try:
            c.remove(force=True)          # force: kills running and paused (frozen) containers
            return c.id[:12], None
        except Exception as err:
            return None, None if "No such container" in str(err) else f"container {c.id[:12]}: {err}"
    found = client.containers.list(all=True, sparse=True, filters={"label": label})
    with ThreadPoolExecutor(8) as pool:      # removals are independent; dockerd serialises what it must
        for removed, error in pool.map(remove, found):
            if removed:
                report["containers"].append(removed)
            if error:
                report["errors"].append(error)
    for n in client.networks.list(filters={"label": label}):
        try:
            n.remove()
            report["networks"].append(n.name)
        except Exception as err:
            report["errors"].append(f"network {n.name}: {err}")
    # Qdiscs inside a container's namespace and on its veth vanish with the container; this catches
    # a veth that outlived a failed removal.
    for c in (record or {}).get("containers", {}).values():
        for q in c.get("qdiscs", []):
            if q.get("where") != "host veth":
                continue
            try:
                idx = links.ifindex(q["ifname"])
            except Exception:
                continue
            if links.unshape(idx):
                report["qdiscs"].append(q["ifname"])
    return report


def leftovers(run_id: str, client=None) -> dict:
    """What of run ``run_id`` still exists: container ids, network names (both empty when clean)."""
    label = f"edgebed.run={run_id}"
    if client is None:
        import docker
        client = docker.from_env(timeout=60)
    return {"containers": [c.id[:12] for c in client.containers.list(all=True, sparse=True,
                                                                      filters={"label": label})],
            "networks": [n.name for n in client.networks.list(filters={"label": label})]}


def labelled_runs(client, run_id_prefix: str = "") -> dict[str, Optional[Path]]:
    """Run ids (starting with ``run_id_prefix``) that own a container or network on this engine, each
    with the run directory its containers' labels name (None if no container names one)."""
    labelled: dict[str, Optional[Path]] = {}
    for c in client.containers.list(all=True, sparse=True, filters={"label": RUN_LABEL}):
        labels = c.attrs.get("Labels") or {}
        rid = labels.get(RUN_LABEL, "")
        if rid.startswith(run_id_prefix):
            labelled.setdefault(rid, Path(labels[RUN_DIR_LABEL]) if labels.get(RUN_DIR_LABEL) else None)
    for n in client.networks.list(filters={"label": RUN_LABEL}):
        rid = (n.attrs.get("Labels") or {}).get(RUN_LABEL, "")
        if rid.startswith(run_id_prefix):
            labelled.setdefault(rid, None)
    return labelled
