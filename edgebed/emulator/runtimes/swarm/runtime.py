"""Swarm runtime: devices as Docker Swarm tasks across a swarm's nodes, shaped by a link agent per node.

Per run: an overlay network ``edgebed-<run>`` and one replicated service per speed class
(``edgebed-<run>-<class>``, one task per device of the class, ``restart-condition none`` so a crashed
task stays down), placed by the scenario's ``runtime.swarm`` constraints and per-node maximum. Each
task's first process maps its slot to its device number, waits for its gate, then execs the device
agent. The PS is a thread of the engine on this host (the manager's host), bound to this host's
address towards the manager's node, so every device's ingress is counted in one place; tasks reach
it through their node's ``docker_gwbridge``. On every node a link agent (``agent.py``) shapes each of
the run's tasks inside its network namespace as soon as the node's engine lists it, opens its gate,
sets its CPU quota once it pushed, freezes it (``docker pause``) for a fail-stop crash and reads its
kernel byte counters. ``runtime.swarm.agents`` says where that agent runs: ``engine`` — an object in
this process per node (nodes on this host only); ``service`` — a node agent process per node, run by a
global service and reporting over ZeroMQ (``node_agent.py``, ``protocol.py``, ``remote.py``). Everything carries the label ``edgebed.run=<run id>`` and is listed in
``run_dir/swarm.json``; ``edgebed clean <run-dir>`` removes exactly that (``clean.py``).

Images need no registry: the offline image is imported into every node's engine (it bind-mounts this
host's Python and project read-only, so every node must have them at the same paths); an image from a
registry (``runtime.swarm.image``) is pulled by the nodes themselves.
"""
from __future__ import annotations

import os
import re
import time
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ....rundir import write_json_atomic
from ...fidelity import PeakRate
from ..base import AgentHandle, AgentSpec, Runtime, RuntimeError_, unknown_classes
from ..docker import engine, images, links
from ..docker.handles import ContainerHandle
from ..docker.quotas import QuotaOnFirstPush
from ..docker.runstate import LABEL, ContainerRunState
from . import clean
from .agent import GATE_FILE, AgentError, LinkAgent, interface_with, ps_source_address
from .remote import AgentHub, RemoteTaskHandle, agent_service

START_TIMEOUT = 180.0    # seconds for every task to be placed, started and shaped
COUNTER_EVERY = 0.5      # seconds between kernel counter samples (one netlink request per device)
DEVICE = "{device}"      # placeholder in a class's command template; the task's gate fills it in
# The task's first process: blocks SIGTERM (see docker/runtime.py's GATE: it is PID 1), maps its slot
# to its device, waits for the link agent's gate file, then execs the agent with its device number.
GATE = ("import os, signal, sys, time\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "dev = sys.argv[1].split(',')[int(os.environ['EDGEBED_SLOT']) - 1]\n"
        f"while not os.path.exists({GATE_FILE!r}):\n    time.sleep(0.02)\n"
        f"args = [a.replace({DEVICE!r}, dev) for a in sys.argv[2:]]\n"
        "os.execvp(args[0], args)\n")


class SwarmSpec(BaseModel):
    """``runtime.swarm`` section of a scenario."""
    model_config = ConfigDict(extra="forbid")
    manager: Optional[str] = Field(None, description="engine endpoint of a swarm manager (default: "
                                   "DOCKER_HOST, else the local engine)")
    nodes: list[str] = Field(default_factory=list, description="engine endpoint of every node that may "
                             "hold tasks, for its link agent (default: the manager's alone)")
    ps_address: Optional[str] = Field(None, description="address of this host the PS binds and tasks "
                                      "connect to (default: this host's source address towards the manager)")
    image: Optional[str] = Field(None, description="agent image; default: the offline image, imported "
                                 "into every node's engine")
    base_cpus: float = Field(1.0, gt=0, description="CPU quota of a slowdown-1 device")
    cpus: dict[str, float] = Field(default_factory=dict, description="explicit CPU quota per speed class")
    memory: Optional[str] = Field(None, description="memory limit per task, e.g. 512m")
    quota_after: Literal["first-push", "start"] = "first-push"
    shape_downlink: bool = True
    constraints: list[str] = Field(default_factory=list, description="placement constraints of every "
                                   "task, e.g. node.role==worker")
    class_constraints: dict[str, list[str]] = Field(default_factory=dict, description="extra constraints "
                                                    "per speed class name")
    max_per_node: Optional[int] = Field(None, ge=1, description="at most this many tasks of a class per node")
    agents: Literal["engine", "service"] = Field("engine", description="where the link agents run: "
                                                 "`engine` (objects in the engine process; nodes on this "
                                                 "host only) or `service` (a global service, one node agent "
                                                 "process per node, reporting over ZeroMQ)")
    node_socket: str = Field("/var/run/docker.sock", description="agents: service — path of each node's "
                             "engine socket on that node; Swarm templates such as {{.Node.ID}} allowed")


class SwarmTaskHandle(ContainerHandle):
    """One device's task container (on whichever node); mirrors Popen through that node's engine."""

    def freeze(self) -> None:
        was = self.frozen
        super().freeze()
        if self.frozen and not was:
            self.runtime.note_crash(self.device)


class SwarmRuntime(ContainerRunState, QuotaOnFirstPush, Runtime):
    name = "swarm"
    Spec = SwarmSpec

    def __init__(self, scenario, run_dir):
        super().__init__(scenario, run_dir)
        # netem, where the kernel has it, would need a second qdisc chain per task; the agent applies
        # delay/jitter/loss at application level on every kernel for now ("app" in the manifest).
        self._init_run_state(COUNTER_EVERY, kernel_delay=False)
        # Swarm names services and networks in its DNS: letters, digits and '-' only ('_', '.' refused),
        # and a name must not end in '-' (a run directory "x-ab_" made network "edgebed-x-ab-": refused).
        self.dns_id = re.sub(r"[^a-zA-Z0-9-]", "-", self.run_id).strip("-") or "run"
        self._manager = None
        self.agents: dict[str, LinkAgent] = {}          # agents: engine — node id → its link agent
        self.node_engines: dict = {}                    # agents: service — node id → its engine (images, clean-up)
        self.hub: Optional[AgentHub] = None             # agents: service — the node agents' channel
        self.ps_host: Optional[str] = None
        self.handles: list[SwarmTaskHandle] = []
        self.record: dict = {"run_id": self.run_id, "label": self.label, "manager": None, "nodes": {},
                             "network": None, "services": [], "devices": {}, "crashes": [], "warnings": []}
        self._ps_start: Optional[dict] = None
        self._started = False

    # -- what the engine asks ---------------------------------------------------------------------------
    @property
    def manager(self):
        if self._manager is None:
            url = engine.endpoint(self.spec.manager)
            client = None
            try:
                client = engine.client(url)
                info = client.info()
            except Exception as err:
                if client is not None:
                    client.close()
                raise RuntimeError_(f"runtime swarm: the manager engine {url} does not answer ({err}); set "
                                    "runtime.swarm.manager to a swarm manager's endpoint") from None
            if not (info.get("Swarm") or {}).get("ControlAvailable"):
                client.close()
                raise RuntimeError_(f"runtime swarm: engine {url} is not a swarm manager; point "
                                    "runtime.swarm.manager at one (docker node ls works there)")
            self._manager = client
            self.record["manager"] = {"endpoint": url, "node_id": info["Swarm"]["NodeID"],
                                      "address": info["Swarm"].get("NodeAddr")}
        return self._manager

    def check(self) -> list[str]:
        problems = super().check()
        if os.geteuid() != 0:
            problems.append("runtime swarm: the link agent shapes links inside task namespaces: run edgebed "
                            "as root on the manager's host")
        for section in ("cpus", "class_constraints"):
            problems += unknown_classes(self.scenario, f"runtime.swarm.{section}", getattr(self.spec, section))
        try:
            self._connect()
        except (RuntimeError_, AgentError) as err:
            problems.append(str(err))
        return problems

    def _connect(self) -> None:
        """Reach the manager and every node's link agent; refuse a Ready node without one."""
        if self.agents:
            return
        mgr = self.manager
        if self.spec.agents == "service":
            self._connect_engines()
        else:
            for url in self.spec.nodes or [self.record["manager"]["endpoint"]]:
                agent = LinkAgent(url, self.label)
                self.agents[agent.node_id] = agent
                self.record["nodes"][agent.node_id] = {"endpoint": url, "address": agent.address,
                                                       "agent": "engine"}
        if not self.spec.constraints and self.spec.agents == "engine":
            for node in mgr.nodes.list():
                st, spec = node.attrs["Status"], node.attrs["Spec"]
                if st.get("State") == "ready" and spec.get("Availability") == "active" \
                        and node.id not in self.agents:
                    raise AgentError(f"runtime.swarm.nodes: swarm node {node.id[:12]} "
                                     f"({st.get('Addr')}) may receive tasks but has no link agent; add its "
                                     "engine endpoint, drain it, or constrain placement")
        addr = self.spec.ps_address or ps_source_address(self.record["manager"]["address"])
        if not addr:
            raise RuntimeError_(f"runtime swarm: no route from this host to the manager node "
                                f"{self.record['manager']['address']}; set runtime.swarm.ps_address")
        self.ps_host = addr

    def _connect_engines(self) -> None:
        """agents: service — the nodes' engines named in ``nodes`` (if any): only to import the offline
        image and to list left-over containers; the engine never enters a task's namespace."""
        if self.node_engines:
            return
        for url in self.spec.nodes or [self.record["manager"]["endpoint"]]:
            try:
                client = engine.client(url)
                node_id = client.info()["Swarm"]["NodeID"]
            except Exception as err:
                raise AgentError(f"runtime.swarm.nodes: engine {url} does not answer as a swarm node "
                                 f"({err})") from None
            self.node_engines[node_id] = client
            self.record["nodes"][node_id] = {"endpoint": url, "agent": "service"}

    def applied(self) -> dict:
        out = super().applied()
        out["swarm"] = {"image": self.spec.image or images.OFFLINE_IMAGE,
                        "cpus": {c.name: self.cpus_of(c.name) for c in self.scenario.workers.classes},
                        "qdiscs": links.kernel_qdiscs(), "quota_after": self.spec.quota_after,
                        "shaping": "per-node link agent: tbf on egress, ifb+tbf on ingress, inside each task's "
                                   "network namespace", "nodes": sorted(self.record["nodes"]),
                        "agents": self.spec.agents}
        out["warning"] = ("link delay, jitter and loss are applied by the agent (application level)"
                          + ("" if self.netem else ": the kernel has no netem")
                          + "; rate is shaped by the kernel (tbf) on the task's node")
        return out

    def ps_bind(self) -> str:
        self._connect()
        if self.spec.agents == "service" and self.hub is None:
            self.hub = AgentHub(self.ps_host, on_counters=self._add_counter_sample)
            self.record["agent_channel"] = self.hub.endpoint
        if self._ps_start is None:
            iface = interface_with(self.ps_host)
            if iface:
                self._ps_start = {"interface": iface, **links.counters(links.ifindex(iface))}
        return f"tcp://{self.ps_host}:0"

    # -- set-up -----------------------------------------------------------------------------------------
    def _save(self) -> None:
        write_json_atomic(self.run_dir / "swarm.json", self.record)

    def agent_command(self, spec: AgentSpec) -> list[str]:
        """A class's command template (``spec.device`` is DEVICE; tests override this hook)."""
        return [self.image.python, "-m", "edgebed.device_agent", "--ps", spec.ps_address,
                "--device", str(spec.device)]

    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        from docker.types import EndpointSpec, Mount, Resources, RestartPolicy, ServiceMode
        self._connect()
        self._started = True
        mgr = self.manager
        # the image on every node that may hold tasks: imported (offline) or pulled by the node (registry)
        engines = [a.client for a in self.agents.values()] or list(self.node_engines.values()) or [mgr]
        for client in engines:
            self.image = self._image_on(client)
        self.record["image"] = {"name": self.image.name, "kind": self.image.kind}
        if self.spec.agents == "service":        # first, so the agents start while the tasks are created
            self.ps_bind()
            name = f"edgebed-{self.dns_id}-agents"
            svc = agent_service(mgr, self, self.image, self.labels, name)
            self.record["agent_service"] = {"name": name, "id": svc.id, "socket": self.spec.node_socket}
            self._save()
        net = mgr.networks.create(f"edgebed-{self.dns_id}", driver="overlay", labels=self.labels,
                                  check_duplicate=True)
        self.record["network"] = {"name": net.name, "id": net.id}
        self._save()
        by_class: dict[str, list[AgentSpec]] = {}
        for s in specs:
            by_class.setdefault(s.speed_class, []).append(s)
        mounts = [Mount(m["bind"], src, type="bind", read_only=True) for src, m in self.image.mounts.items()]
        for idx, klass in enumerate(self.scenario.workers.classes):
            group = by_class.get(klass.name)
            if not group:
                continue
            devices = ",".join(str(s.device) for s in group)
            template = AgentSpec(DEVICE, klass.name, group[0].ps_address, group[0].env)
            cmd = [self.image.python, "-c", GATE, devices, *self.agent_command(template)]
            env = {**self.image.env, **template.environment(), "EDGEBED_SLOT": "{{.Task.Slot}}"}
            constraints = [*self.spec.constraints, *self.spec.class_constraints.get(klass.name, [])]
            name = f"edgebed-{self.dns_id}-c{idx}"
            svc = mgr.services.create(
                self.image.name, command=cmd, name=name, labels=self.labels,
                container_labels={**self.labels, f"{LABEL}.class": klass.name},
                env=[f"{k}={v}" for k, v in env.items()], mounts=mounts, workdir="/tmp",
                networks=[net.id], mode=ServiceMode("replicated", replicas=len(group)),
                restart_policy=RestartPolicy(condition="none"),
                resources=Resources(mem_limit=_bytes(self.spec.memory)) if self.spec.memory else None,
                endpoint_spec=EndpointSpec(mode="dnsrr"),
                constraints=constraints or None, maxreplicas=self.spec.max_per_node or 0)
            self.record["services"].append({"name": name, "id": svc.id, "class": klass.name,
                                            "devices": [s.device for s in group]})
            self._save()
        self.handles = self._shape_all_remote(specs) if self.hub is not None else self._shape_all(specs)
        self._save()
        if self.spec.quota_after == "start":
            self.apply_quotas(all_pending=True)
        return list(self.handles)

    def _image_on(self, client) -> images.ImageInfo:
        """The agent image as a node's engine has it: the offline one imported there, or a registry
        image that node pulls itself when Swarm starts the task (not present yet: nothing to inspect)."""
        import docker
        try:
            return images.resolve(self.spec.image, client)
        except docker.errors.ImageNotFound:
            return images.ImageInfo(self.spec.image, "dockerfile", "python", {},
                                    {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})

    def _shape_all(self, specs: list[AgentSpec]) -> list[SwarmTaskHandle]:
        """Wait for every task to run on its node; shape it there and open its gate."""
        want = {s.device: s for s in specs}
        devices_of = {s["name"]: s["devices"] for s in self.record["services"]}
        handles: dict[int, SwarmTaskHandle] = {}
        deadline = time.monotonic() + START_TIMEOUT
        checked = time.monotonic()
        while len(handles) < len(want):
            for node_id, agent in self.agents.items():
                for task in agent.tasks():
                    devs = devices_of.get(task.service)
                    if devs is None or task.slot > len(devs) or devs[task.slot - 1] in handles \
                            or task.status != "running":
                        continue
                    d = devs[task.slot - 1]
                    handles[d] = self._shape_one(want[d], node_id, agent, task)
            if len(handles) < len(want):
                if time.monotonic() - checked > 2.0:     # a task that failed or was rejected: say why now
                    checked = time.monotonic()
                    done = {(e["service"], e["slot"]) for e in self.record["devices"].values()}
                    failed = self._task_errors(("failed", "rejected", "complete", "shutdown", "orphaned"), done)
                    if failed:
                        raise RuntimeError_(f"runtime swarm: tasks ended before their links were shaped: {failed}")
                if time.monotonic() > deadline:
                    raise RuntimeError_(f"runtime swarm: {len(want) - len(handles)} of {len(want)} tasks not "
                                        f"running after {START_TIMEOUT:.0f} s: {self._task_errors()}")
                time.sleep(0.2)
        return [handles[s.device] for s in specs]

    def _shape_one(self, spec: AgentSpec, node_id: str, agent: LinkAgent, task) -> SwarmTaskHandle:
        klass = self.scenario.class_of(spec.device)
        entry = {"device": spec.device, "class": spec.speed_class, "node": node_id, "service": task.service,
                 "slot": task.slot, "container": task.container_id}
        with self._lock:
            self.record["devices"][str(spec.device)] = entry
        entry.update(agent.prepare(spec.device, task.container_id, klass, self.ps_host, self.spec.shape_downlink))
        entry["shaped_by"] = {"mode": "engine", "node": node_id, "pid": os.getpid()}
        handle = SwarmTaskHandle(self, spec.device, agent.client.containers.get(task.container_id))
        handle.node = node_id
        self._quota_pending[spec.device] = self.cpus_of(spec.speed_class)
        return handle

    def _shape_all_remote(self, specs: list[AgentSpec]) -> list[RemoteTaskHandle]:
        """agents: service — tell every node agent which service slots are which devices, then wait
        until each device's agent reports it shaped and its gate open."""
        classes = {c.name: c.model_dump(mode="json") for c in self.scenario.workers.classes}
        self.hub.send_setup(services=[{"name": s["name"], "class": s["class"], "devices": s["devices"]}
                                      for s in self.record["services"]],
                            classes=classes, ps_host=self.ps_host, downlink=self.spec.shape_downlink,
                            report_every=COUNTER_EVERY)
        want = {s.device for s in specs}
        deadline = time.monotonic() + START_TIMEOUT
        while not self.hub.wait_for(lambda: want <= set(self.hub.shaped) or bool(self.hub.errors), 2.0):
            done = frozenset((e.get("service"), e.get("slot")) for e in list(self.hub.shaped.values()))
            failed = self._task_errors(("failed", "rejected", "complete", "shutdown", "orphaned"), done)
            if failed:
                raise RuntimeError_(f"runtime swarm: tasks or node agents ended before the links were shaped: {failed}")
            if time.monotonic() > deadline:
                missing = sorted(want - set(self.hub.shaped))
                raise RuntimeError_(f"runtime swarm: devices {missing[:10]} not shaped after {START_TIMEOUT:.0f} s; "
                                    f"node agents that said hello: {sorted(n[:12] for n in self.hub.hello)}; "
                                    f"{self._task_errors()}")
        if self.hub.errors:
            raise RuntimeError_(f"runtime swarm: a node agent could not shape: {'; '.join(self.hub.errors[:4])}")
        by_dev = {d: s for s in self.record["services"] for d in s["devices"]}
        handles = []
        for s in specs:
            e = self.hub.shaped[s.device]
            self.record["devices"][str(s.device)] = {"device": s.device, "class": s.speed_class,
                                                     "node": e["node"], "service": by_dev[s.device]["name"], **e}
            handles.append(RemoteTaskHandle(self, s.device, e["node"]))
            self._quota_pending[s.device] = self.cpus_of(s.speed_class)
        return handles

    def _task_errors(self, states: Optional[tuple] = None, skip: frozenset = frozenset()) -> str:
        """What the manager says of tasks not running (only those in ``states``, if given; not those
        whose (service, slot) is in ``skip``)."""
        errs = []
        services = self.record["services"] + ([self.record["agent_service"]] if "agent_service" in self.record else [])
        for s in services:
            try:
                for t in self.manager.services.get(s["id"]).tasks():
                    st = t.get("Status", {})
                    if (s["name"], t.get("Slot")) in skip:
                        continue
                    if st.get("State") != "running" and (states is None or st.get("State") in states):
                        errs.append(f"{s['name']}.{t.get('Slot')}: {st.get('State')} {st.get('Err') or st.get('Message')}")
            except Exception as err:
                errs.append(f"{s['name']}: {err}")
        if states is not None:
            return "; ".join(errs[:6])
        return "; ".join(errs[:6]) or "no task reports an error (placement still pending?)"

    def note_crash(self, device: int) -> None:
        entry = self.record["devices"].get(str(device), {})
        self.record["crashes"].append({"device": device, "node": entry.get("node"), "at_unix": time.time(),
                                       "how": "docker pause on the task's node; restart-condition none"})

    # -- during the run ---------------------------------------------------------------------------------
    def _set_quota(self, handle, device: int, cpus: float) -> None:
        if self.hub is not None:
            self.hub.request(handle.node, "quota", device=device, cpus=cpus)
        else:
            LinkAgent.set_quota(handle.container, cpus)
        self.record["devices"][str(device)]["cpus"] = cpus

    def _list_status(self) -> dict[str, str]:
        """agents: engine — container states of the run's tasks on every node (one listing per node),
        for SwarmTaskHandle.poll (the CPU share sampled is that of the engine's host)."""
        status = {}
        for agent in self.agents.values():
            try:
                status.update(agent.states())
            except Exception:
                pass
        return status

    def sample_counters(self, force: bool = False) -> None:
        if not self._sample_due(force):
            return
        now = self._counter_at
        if self.hub is not None:         # the node agents report on their own; their peaks are added as they come
            self._counters.update(self.hub.counters)
        for agent in self.agents.values():
            for d, c in agent.counters().items():
                self._counters[d] = c
                self._uplink_peaks.setdefault(d, PeakRate()).add(now, c["uplink_bytes"])

    def _add_counter_sample(self, device: int, t: float, c: dict) -> None:
        """A node agent's counter sample (``t``: that agent's monotonic clock, the same for all of a
        device's samples), called from the hub's thread."""
        self._uplink_peaks.setdefault(device, PeakRate()).add(t, c["uplink_bytes"])

    def kernel_traffic(self) -> dict:
        """On-the-wire bytes per device, per class, per node and at the PS (kernel counters)."""
        per_class: dict = {}
        per_node: dict = {}
        for d, c in self._counters.items():
            entry = self.record["devices"][str(d)]
            for key, agg in ((entry["class"], per_class), (entry["node"], per_node)):
                a = agg.setdefault(key, {"uplink_bytes": 0, "downlink_bytes": 0, "devices": 0})
                a["uplink_bytes"] += c["uplink_bytes"]
                a["downlink_bytes"] += c["downlink_bytes"]
                a["devices"] += 1
        ps = None
        if self._ps_start is not None:
            try:
                now = links.counters(links.ifindex(self._ps_start["interface"]))
                ps = {"ingress_bytes": now["rx_bytes"] - self._ps_start["rx_bytes"],
                      "egress_bytes": now["tx_bytes"] - self._ps_start["tx_bytes"],
                      "interface": self._ps_start["interface"]}
            except links.LinkError:
                ps = None
        return {"source": "kernel interface counters (each task's interface towards the PS, read inside its "
                          "network namespace on its node; the PS host's interface for the PS)",
                "sampled_every_s": COUNTER_EVERY,
                "devices": {str(d): c for d, c in sorted(self._counters.items())},
                "classes": per_class, "nodes": per_node, "ps": ps, "host_cpu": self.host_cpu()}

    # -- teardown ---------------------------------------------------------------------------------------
    def cleanup(self) -> None:
        if not self._started and not self.agents and self.hub is None:
            return
        if self.hub is not None:          # final reports, logs; the agents release their tasks and end
            late = self.hub.bye()
            if late:
                self.record["warnings"].append(f"node agents {[n[:12] for n in late]} did not say bye")
            self.record["agent_byes"] = dict(self.hub.byes)
            self.record["agent_dropped_messages"] = self.hub.dropped
        self._write_kernel_traffic()
        self._save_logs()
        removed_qdiscs = []
        for agent in self.agents.values():
            for d in list(agent._sockets):
                removed_qdiscs += agent.unshape(d)
            agent.close()
        self._save()
        if self._started:
            try:
                report = clean.clean_swarm(self.record, manager=self.manager)
            except Exception as err:       # say it and keep the run's results; `edgebed clean` retries
                report = {"errors": [f"clean-up failed: {err}; run `edgebed clean {self.run_dir}`"]}
            report["qdiscs"] = removed_qdiscs + report.get("qdiscs", [])
            self.record["cleanup"] = report
        self._save()
        if self.hub is not None:
            self.hub.close()
            self.hub = None
        for client in self.node_engines.values():
            client.close()
        self.node_engines = {}
        self.agents = {}
        self.handles = []
        self._started = False

    def _save_logs(self) -> None:
        log_dir = self.run_dir / "logs"
        log_dir.mkdir(exist_ok=True)
        for h in self.handles:
            try:
                text = self.hub.logs[h.device].encode() if self.hub is not None else h.container.logs()
                (log_dir / f"agent-{h.device:04d}.log").write_bytes(text)
            except Exception:
                pass


def _bytes(size: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = size.strip().lower().rstrip("b")
    return int(float(s[:-1]) * units[s[-1]]) if s and s[-1] in units else int(s)

