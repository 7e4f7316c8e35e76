"""Link agent: one per swarm node; shapes, throttles, freezes and counts the run's tasks on that node.

A task's container is created by the node's own engine wherever the scheduler placed it, so shaping
has to happen on that node: the agent lists the run's containers through the node's engine, enters
each one's network namespace (``/proc/<pid>/ns/net``, the pid the node's engine reports) and installs
there a tbf on egress of the interface that routes to the PS (the uplink) and an ingress qdisc that
redirects to an ifb device holding a tbf (the downlink). Both live inside the task's namespace, so they
vanish with the task. It then opens the task's gate (a file written into the container's root through
``/proc/<pid>/root``): no byte leaves a device before its qdiscs are in place. CPU quotas and
``docker pause`` (fail-stop) go through the node's engine. Kernel byte counters are read through a
netlink socket kept open in each task's namespace, so the last values stay readable after it ended.

Where it runs (``runtime.swarm.agents``): ``engine`` — inside the edgebed engine process, one object
per node, which then needs that node's engine endpoint and its processes in this host's PID namespace
(``pid_of`` refuses a task it can't reach instead of pretending); ``service`` — inside the node agent
process (``node_agent.py``) on the node itself, which sees the host's procfs at ``proc_root``.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .... import procs
from ..docker import engine, links

GATE_FILE = "/tmp/edgebed-gate"       # inside the task container; its first process waits for it


class AgentError(RuntimeError):
    """The link agent can't do its job on a node; the message says which node and why."""


@dataclass
class Task:
    """One of the run's task containers on a node, as its engine lists it."""
    container_id: str
    service: str
    slot: int
    status: str


class LinkAgent:
    """One node's link agent. Called by the swarm runtime only (its start, drive and cleanup)."""

    def __init__(self, endpoint: str, run_label: str, proc_root: str = "/proc"):
        self.endpoint = endpoint
        self.proc_root = proc_root          # the node's procfs: /proc, or a host /proc mounted in a container
        self.run_label = run_label
        self.client = None
        try:
            self.client = engine.client(endpoint)
            info = self.client.info()
        except Exception as err:
            if self.client is not None:
                self.client.close()
            raise AgentError(f"node engine {endpoint} does not answer ({err}); start it or remove it "
                             "from runtime.swarm.nodes") from None
        sw = info.get("Swarm") or {}
        if sw.get("LocalNodeState") != "active":
            self.client.close()
            raise AgentError(f"node engine {endpoint} is not part of a swarm (state "
                             f"{sw.get('LocalNodeState')!r}); join it (docker swarm join) first")
        self.node_id: str = sw["NodeID"]
        self.address: str = sw.get("NodeAddr", "")
        self._sockets: dict[int, tuple] = {}     # device → (open IPRoute in its netns, ifindex)
        self._lock = threading.Lock()

    # -- the run's tasks on this node ---------------------------------------------------------------
    def tasks(self) -> list[Task]:
        out = []
        for c in self.client.containers.list(all=True, sparse=True, filters={"label": self.run_label}):
            labels = c.attrs.get("Labels") or {}
            name = labels.get("com.docker.swarm.task.name", "")    # <service>.<slot>.<task id>
            parts = name.rsplit(".", 2)
            if len(parts) != 3 or not parts[1].isdigit():
                continue
            out.append(Task(c.id, parts[0], int(parts[1]), c.attrs.get("State", "")))
        return out

    def pid_of(self, container) -> int:
        """The task's first process as a pid of this host, checked to be that container's."""
        container.reload()
        pid = container.attrs["State"]["Pid"]
        try:
            ok = pid and container.id in Path(f"{self.proc_root}/{pid}/cgroup").read_text()
        except OSError:
            ok = False
        if not ok:
            raise AgentError(f"node {self.node_id[:12]} ({self.endpoint}): task {container.name} (pid {pid}) "
                             "is not a process of this host; the link agent must run on the node that "
                             "holds the task (see docs/runtimes-swarm.md)")
        return pid

    # -- shaping ----------------------------------------------------------------------------------------
    def shape(self, device: int, pid: int, klass, ps_host: str, downlink: bool = True) -> dict:
        """Shape task ``pid``'s interface towards ``ps_host``: uplink on its egress (tbf), downlink on
        its ingress (ifb + tbf). Returns what was installed, for swarm.json."""
        netns = f"{self.proc_root}/{pid}/ns/net"
        ipr = links.open_iproute(netns)
        try:
            route = ipr.route("get", dst=ps_host)
            index = route[0].get_attr("RTA_OIF")
            ifname = ipr.link("get", index=index)[0].get_attr("IFLA_IFNAME")
        except Exception as err:
            ipr.close()
            raise AgentError(f"device {device}: no route to the PS at {ps_host} inside task pid {pid} "
                             f"on node {self.node_id[:12]}: {err}") from None
        with self._lock:
            self._sockets[device] = (ipr, index)
        out = {"ifname": ifname, "ifindex": index, "netns_pid": pid, "qdiscs": []}
        up = links.shape(index, klass.uplink, netns=netns)
        out["uplink"] = up.levels
        if up.qdisc:
            out["qdiscs"].append({"where": f"task {ifname} egress", "kind": up.qdisc})
        if downlink and klass.downlink.rate is not None and links.kernel_qdiscs()["tbf"]:
            ifb = links.shape_ingress(index, klass.downlink.rate, netns=netns)
            out["qdiscs"].append({"where": f"task {ifname} ingress → {ifb}", "kind": "ingress+tbf"})
            out["downlink"] = {**links.levels(klass.downlink), "rate": "kernel"}
        else:
            out["downlink"] = {**links.levels(klass.downlink), **({"rate": "none"} if not downlink else {})}
        return out

    def open_gate(self, pid: int) -> None:
        """Let the task's first process exec the agent (it waits for GATE_FILE in its own root)."""
        Path(f"{self.proc_root}/{pid}/root{GATE_FILE}").touch()

    def prepare(self, device: int, container_id: str, klass, ps_host: str, downlink: bool = True) -> dict:
        """Everything a new task needs on its node before it may send: find its first process, shape
        its link, wait until it blocks SIGTERM (the gate's first act: from then no signal is lost) and
        open its gate. Returns swarm.json's entry for it (container, pid, interface, qdiscs)."""
        container = self.client.containers.get(container_id)
        pid = self.pid_of(container)
        entry = {"container": container.id, "pid": pid}
        entry.update(self.shape(device, pid, klass, ps_host, downlink))
        procs.wait_blocked(pid, 15, proc=self.proc_root)
        self.open_gate(pid)
        return entry

    def states(self) -> dict[str, str]:
        """State of each of the run's containers on this node (one listing): id → running, paused, exited…"""
        return {c.id: c.attrs.get("State", "")
                for c in self.client.containers.list(all=True, sparse=True, filters={"label": self.run_label})}

    def unshape(self, device: int) -> list[str]:
        """Remove the qdiscs of ``device`` if its namespace still exists; names what was removed."""
        with self._lock:
            held = self._sockets.get(device)
        if held is None:
            return []
        ipr, index = held
        removed = []
        try:
            for q in ipr.get_qdiscs(index):
                if q["handle"] in (links.ROOT_HANDLE, links.INGRESS_HANDLE):
                    ipr.tc("del", index=index, handle=q["handle"], parent=q["parent"])
                    removed.append(f"device {device}: {q.get_attr('TCA_KIND')}")
            for found in ipr.link_lookup(ifname=links.IFB_NAME):
                ipr.link("del", index=found)
                removed.append(f"device {device}: {links.IFB_NAME}")
        except Exception:
            pass       # namespace torn down under us: its qdiscs went with it
        return removed

    # -- during the run -------------------------------------------------------------------------------
    def counters(self) -> dict[int, dict]:
        """Kernel counters of each shaped device's interface (cumulative): tx is its uplink on the
        wire, rx its downlink."""
        out = {}
        with self._lock:
            held = dict(self._sockets)
        for d, (ipr, index) in held.items():
            try:
                msg = ipr.link("get", index=index)[0]
            except Exception:
                continue        # interface gone: the last sample stands
            st = msg.get_attr("IFLA_STATS64") or msg.get_attr("IFLA_STATS")
            out[d] = {"uplink_bytes": int(st["tx_bytes"]), "downlink_bytes": int(st["rx_bytes"]),
                      "uplink_packets": int(st["tx_packets"]), "downlink_packets": int(st["rx_packets"])}
        return out

    @staticmethod
    def set_quota(container, cpus: float) -> None:
        container.update(cpu_period=100_000, cpu_quota=max(1000, int(cpus * 100_000)))

    def close(self) -> None:
        """Drop the namespace sockets (their namespaces may then vanish) and the engine client."""
        with self._lock:
            held, self._sockets = self._sockets, {}
        for ipr, _ in held.values():
            try:
                ipr.close()
            except Exception:
                pass
        self.client.close()


def ps_source_address(address: str) -> Optional[str]:
    """This host's source address towards ``address`` (a swarm manager's node address): where a PS
    on this host is reachable from the swarm's nodes. None if there is no route."""
    try:
        with links.iproute() as ipr:
            route = ipr.route("get", dst=address)
        return route[0].get_attr("RTA_PREFSRC")
    except Exception:
        return None


def interface_with(address: str) -> Optional[str]:
    """Name of this host's interface that holds ``address`` (the PS's), or None."""
    with links.iproute() as ipr:
        for a in ipr.get_addr(address=address):
            return ipr.link("get", index=a["index"])[0].get_attr("IFLA_IFNAME")
    return None
