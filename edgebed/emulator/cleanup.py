"""Cleanup: remove what one run recorded — its containers, network and qdiscs, its agent processes.

``edgebed clean <run-dir>`` calls ``clean``. Only what the run directory names is touched: PIDs in
``pids.json`` (and only while ``/proc/<pid>/cmdline`` still shows an edgebed device agent, since a PID
may have been reused), containers and networks carrying the label ``edgebed.run=<run id>`` recorded in
``docker.json``, and the root qdiscs edgebed put on that run's host-side veths. Never by name pattern,
never another run's objects. Safe to call repeatedly.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Optional

AGENT_MARK = b"edgebed.device_agent"


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _is_agent(pid: int) -> bool:
    try:
        return AGENT_MARK in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def clean_pids(pids: list[int]) -> dict:
    """SIGKILL each recorded PID that is still an edgebed device agent (works on stopped ones too)."""
    killed, skipped = [], []
    for pid in pids:
        pid = int(pid)
        if pid <= 1 or not _is_agent(pid):
            skipped.append(pid)
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            skipped.append(pid)
    return {"killed": killed, "not_agents_or_gone": skipped}


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
    from .runtimes.docker import links
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
    from concurrent.futures import ThreadPoolExecutor
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


def clean(run_dir: str | Path) -> dict:
    """Remove everything the run in ``run_dir`` recorded; returns a report of what was removed."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run directory")
    report: dict = {"run_dir": str(run_dir)}
    pids = _read_json(run_dir / "pids.json")
    if pids:
        report["processes"] = clean_pids(pids.get("pids", []))
    record = _read_json(run_dir / "docker.json")
    if record and record.get("run_id"):
        try:
            report["docker"] = clean_docker(record["run_id"], record=record)
        except Exception as err:   # engine not reachable: say so, keep what was done
            report["docker"] = {"errors": [f"Docker engine not reachable: {err}"]}
    return report


def describe(report: dict) -> str:
    """One human line per kind of object removed."""
    lines = []
    p = report.get("processes")
    if p is not None:
        lines.append(f"processes: killed {len(p['killed'])}, skipped {len(p['not_agents_or_gone'])} "
                     "(gone or no longer an edgebed agent)")
    d = report.get("docker")
    if d is not None:
        lines.append(f"docker: removed {len(d.get('containers', []))} containers, "
                     f"{len(d.get('networks', []))} networks, {len(d.get('qdiscs', []))} qdiscs"
                     + (f", killed {len(d['agents'])} forked agents" if d.get("agents") else ""))
        lines += [f"docker error: {e}" for e in d.get("errors", [])]
    return "\n".join(lines) or "nothing recorded to clean"
