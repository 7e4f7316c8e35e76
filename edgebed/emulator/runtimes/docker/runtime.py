"""Docker runtime: one container per device on an internal bridge, kernel-shaped links, CPU quotas.

Per run: an internal bridge network ``edgebed-<run>`` (the PS, a host thread, binds the bridge's
gateway address), one container per device running ``python -m edgebed.device_agent``, a tbf qdisc
on each container's ``eth0`` (uplink) and on its host-side veth (downlink), netem where the kernel has
it (else delay/jitter/loss stay in the agent: "app"), a CPU quota per speed class applied once the
device's first push arrived (a throttled start-up is ~11x slower), and ``docker pause`` (cgroup
freezer) for a fail-stop crash (killed and started again after ``dynamics.availability.recover_after``:
docker/churn.py; a trace's rates and slowdown: docker/tracelive.py). Everything carries the label ``edgebed.run=<run id>`` and is listed
in ``run_dir/docker.json``, so ``edgebed clean <run-dir>`` removes exactly this run's objects.
Kernel interface counters (veth per device, bridge for the PS) go to ``run_dir/kernel_traffic.json``.

Where the agent process lives (``runtime.docker.agents``):

* ``container`` (default): the container's own process imports torch and runs the agent — about
  150 MiB per device, so roughly 135 devices fit in 20 GiB.
* ``forked``: the container only holds the device's namespaces, cgroups and shaped link (its process
  is ``sleep infinity``); the agent is forked on the host from the torch-preloaded fork server of the
  local runtime and enters the container's network namespace and cgroups (``nsjoin.py``)
  before it opens a socket. Its packets leave through the shaped ``eth0``, the CPU quota throttles it
  and ``docker pause`` freezes it, while torch's pages are shared copy-on-write by all agents. It does
  not share the container's mount and PID namespaces.
"""
from __future__ import annotations

import dataclasses

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ...fidelity import PeakRate
from .... import procs
from ....atomic import replacing
from ....console import warn
from ....data.bounded import environment as limits_environment   # EDGEBED_LIMIT_*, as validate read them
from ....rundir import write_json_atomic
from . import engine, images, links, nsjoin
from .clean import clean_docker, leak_advice
from ..base import AgentHandle, AgentSpec, Runtime, RuntimeError_, unknown_classes
from .handles import ContainerHandle, ForkedAgentHandle
from .quotas import QuotaOnFirstPush
from .churn import ContainerChurn, LiveChurn, LiveRecovery
from .live import LiveLinkEvents
from .pslink import PSLink
from .tracelive import LiveTrace, TracedDevices
from .runstate import ContainerRunState, cpus_for  # noqa: F401 — cpus_for: also this module's (kubernetes)

LABEL = images.LABEL
RUN_LABEL = f"{LABEL}.run"
GATE_DIR = "/edgebed-gate"
# The container's first process waits for its gate file, written once its links are shaped, then
# execs the agent: no byte leaves a device before its qdiscs are in place. It is PID 1, and the
# kernel drops a signal PID 1 has no handler for: SIGTERM stays blocked until the agent's handler is
# up (the mask survives exec; device_agent/__main__.py unblocks it), and the runtime hands out a
# device's handle only once the gate holds it: a terminate() during the wait or the agent's start-up
# ends the agent instead of being lost. (docker's --init would do it too, but needs /sbin/docker-init,
# which the offline image's read-only /usr mount can't take.)
# The agent's gate: it waits, SIGTERM blocked, until the engine creates its file (links shaped), then
# becomes the agent. A restarted container's file holds the attempt its hello says (EDGEBED_ATTEMPT).
GATE = ("import os, signal, sys, time\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "while not os.path.exists(sys.argv[1]):\n    time.sleep(0.02)\n"
        "a = open(sys.argv[1]).read().strip()\n"
        "if a:\n    os.environ['EDGEBED_ATTEMPT'] = a\n"
        "os.execvp(sys.argv[2], sys.argv[2:])\n")
HOLDER = "/usr/bin/sleep"   # ``agents: forked``: the container's only process (coreutils, in every image)
DYNAMICS = ("event:link", "event:partition", "availability", "recovery", "trace", "ps-link", "event:ps-link")
COUNTER_EVERY = 0.25     # seconds between kernel counter samples (one netlink dump each)


class DockerSpec(BaseModel):
    """``runtime.docker`` section of a scenario."""
    model_config = ConfigDict(extra="forbid")
    image: Optional[str] = Field(None, description="agent image; default: the offline image (imported on first use)")
    base_cpus: float = Field(1.0, gt=0, description="CPU quota of a slowdown-1 device; class quota = base_cpus / slowdown")
    cpus: dict[str, float] = Field(default_factory=dict, description="explicit CPU quota per speed class name")
    memory: Optional[str] = Field(None, description="memory limit per container, e.g. 512m")
    ps_placement: Literal["host"] = Field("host", description="the PS runs in the engine on the host and "
                                          "binds the bridge gateway")
    quota_after: Literal["first-push", "start"] = Field(
        "first-push", description="when the CPU quota is applied: after the device's first push "
        "(start-up unthrottled) or right at start")
    start_parallel: int = Field(4, ge=1, le=32, description="containers created concurrently")
    shape_downlink: bool = True
    agents: Literal["container", "forked"] = Field(
        "container", description="run the agent inside the container (container) or fork it on the host "
        "from a torch-preloaded parent and move it into the container's netns and cgroups (forked; "
        "needed for hundreds of devices)")


class DockerRuntime(ContainerRunState, QuotaOnFirstPush, ContainerChurn, TracedDevices, Runtime):
    name = "docker"
    Spec = DockerSpec

    def __init__(self, scenario, run_dir):
        super().__init__(scenario, run_dir)
        self._init_run_state(COUNTER_EVERY)
        self._client = None
        self.network = None
        self.gateway: Optional[str] = None
        self.image: Optional[images.ImageInfo] = None
        self.handles: list[ContainerHandle] = []
        self.record: dict = {"run_id": self.run_id, "label": self.label,
                             "network": None, "containers": {}, "warnings": []}
        self._bridge_start: Optional[dict] = None
        self.leaked: dict = {}    # docker objects the teardown could not remove (summary.json "leftovers")
        self.gate_dir = self.run_dir / "gate"
        # timed link events and partitions, applied live (docker/live.py); availability churn
        # (docker/churn.py); the PS's shared link (docker/pslink.py)
        self.capabilities = dataclasses.replace(self.capabilities, dynamics=frozenset(DYNAMICS))
        self.live = LiveLinkEvents(self) if scenario.dynamics.events else None
        self.churn: Optional[LiveChurn] = None   # made in start(), once the trace is read
        self.trace: Optional[LiveTrace] = None   # a trace's speed and bandwidth columns (docker/tracelive.py)
        self.timed: list = [self.live] if self.live is not None else []
        # crash recovery (docker/churn.py): a paused container killed, started and re-shaped
        self.recovery = LiveRecovery(self) if "recovery" in scenario.dynamics.parts() else None
        if self.recovery is not None:
            self.timed.append(self.recovery)
        self._specs: dict[int, AgentSpec] = {}
        self._counter_base: dict[int, dict] = {}   # device → counts of its veths before a restart

    # -- what the engine asks ----------------------------------------------------------------
    def check(self) -> list[str]:
        problems = super().check()
        if os.geteuid() != 0:
            problems.append("runtime docker shapes links with tc inside container namespaces and reads "
                            "interface counters: run edgebed as root (or use runtime: local)")
        try:
            self.client
        except RuntimeError_ as err:
            problems.append(str(err))
        return (problems + unknown_classes(self.scenario, "runtime.docker.cpus", self.spec.cpus)
                + LiveLinkEvents.problems(self.scenario) + self._churn_problems())

    def applied(self) -> dict:
        out = super().applied()
        out["docker"] = {"image": self.spec.image or images.OFFLINE_IMAGE,
                         "cpus": {c.name: self.cpus_of(c.name) for c in self.scenario.workers.classes},
                         "qdiscs": links.kernel_qdiscs(), "quota_after": self.spec.quota_after,
                         "agents": self.spec.agents}
        live = {"event:link": "kernel, live (rate only)", "event:partition": "kernel, live (eth0 down)",
                "availability": "container killed (offline), started and re-shaped (online)",
                "recovery": "paused container killed, started and re-shaped after the delay",
                "trace": "online: container killed / started; bandwidth: tbf rate changed live; "
                         "slowdown: CPU quota changed live",
                "ps-link": "kernel: tbf on the bridge (egress), bridge ingress → ifb with tbf (ingress)",
                "event:ps-link": "kernel, live (rate)"}
        if parts := [p for p in self.scenario.dynamics.parts() if p in live]:
            out["dynamics"] = {p: live[p] for p in parts}
        if not links.kernel_qdiscs()["netem"]:
            out["warning"] = ("kernel has no netem: link delay, jitter and loss are applied by the agent "
                              "(application level); rate is shaped by the kernel (tbf)")
        return out

    @property
    def client(self):
        if self._client is None:
            try:
                self._client = engine.client()
                self._client.ping()
            except Exception as err:
                raise RuntimeError_(f"runtime docker: the Docker engine does not answer ({err}); "
                                    "start it with `make provision` (or `dockerd &`) and retry") from None
        return self._client

    def ps_bind(self) -> str:
        self._ensure_network()
        return f"tcp://{self.gateway}:0"

    # -- set-up -------------------------------------------------------------------------------
    def _save(self) -> None:
        write_json_atomic(self.run_dir / "docker.json", self.record)

    def _ensure_network(self) -> None:
        if self.network is not None:
            return
        name = f"edgebed-{self.run_id}"
        self.network = self.client.networks.create(name, driver="bridge", internal=True,
                                                   labels=self.labels, check_duplicate=True)
        self.network.reload()
        cfg = self.network.attrs["IPAM"]["Config"][0]
        self.gateway = cfg["Gateway"]
        bridge = links.bridge_ifname(self.network.id)
        self.record["network"] = {"name": name, "id": self.network.id, "bridge": bridge,
                                  "subnet": cfg["Subnet"], "gateway": self.gateway}
        self._save()
        try:
            self._bridge_start = links.counters(links.ifindex(bridge))
        except links.LinkError:
            self._bridge_start = None

    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        self._ensure_network()
        self._specs = {s.device: s for s in specs}
        dyn = self.scenario.dynamics
        if dyn.ps_link is not None and (dyn.ps_link.ingress or dyn.ps_link.egress):
            pslink = PSLink(self)
            self.timed.append(pslink)
            try:
                pslink.install()
            finally:
                self._save()
        if {"availability", "trace"} & set(dyn.parts()):
            from ....traces import read_trace
            trace = read_trace(dyn.trace.path, self.scenario.workers.n) if dyn.trace is not None else None
            horizon = (self.scenario.stop.wall_time or 86400.0) / (self.clock.dilation or 1.0)
            self.churn = LiveChurn(self, trace, horizon)
            self.timed.append(self.churn)
            if trace is not None:
                self.trace = LiveTrace(self, trace)
                self.timed.append(self.trace)
        self.image = images.resolve(self.spec.image, self.client)
        self.record["image"] = {"name": self.image.name, "kind": self.image.kind}
        self.gate_dir.mkdir(exist_ok=True)
        self._save()
        with ThreadPoolExecutor(self.spec.start_parallel) as pool:
            handles = list(pool.map(self._start_one, specs))
        self.handles = handles
        self._save()
        if self.spec.agents == "forked":
            self._fork_agents(specs, handles)
        if self.spec.quota_after == "start":
            self.apply_quotas(all_pending=True)
        return list(handles)

    def agent_command(self, spec: AgentSpec) -> list[str]:
        """Command a device's container runs (tests override it to run a traffic generator)."""
        return [self.image.python, "-m", "edgebed.device_agent", "--ps", spec.ps_address,
                "--device", str(spec.device)]

    def _start_one(self, spec: AgentSpec) -> ContainerHandle:
        img = self.image
        name = f"edgebed-{self.run_id}-{spec.device:04d}"
        labels = {**self.labels, f"{LABEL}.device": str(spec.device), f"{LABEL}.class": spec.speed_class}
        kwargs = dict(name=name, labels=labels, network=self.network.name, detach=True,
                      environment={**img.env, **limits_environment(), **spec.environment()},
                      volumes={**img.mounts, **images.user_mounts(self.scenario, img.mounts),
                               str(self.gate_dir): {"bind": GATE_DIR, "mode": "ro"}},
                      working_dir="/tmp", hostname=f"device-{spec.device:04d}")
        if self.spec.memory:
            kwargs["mem_limit"] = self.spec.memory
        if self.spec.agents == "forked":
            cmd = [HOLDER, "infinity"]     # holds namespaces and cgroups; the agent joins them
        else:
            cmd = [img.python, "-c", GATE, f"{GATE_DIR}/{spec.device}", *self.agent_command(spec)]
        container = self.client.containers.create(img.name, cmd, **kwargs)
        entry = {"device": spec.device, "class": spec.speed_class, "name": name, "id": container.id}
        with self._lock:
            self.record["containers"][str(spec.device)] = entry
        container.start()
        container.reload()
        pid = container.attrs["State"]["Pid"]
        entry["pid"] = pid
        if not pid:
            raise RuntimeError_(f"device {spec.device}: container {name} did not start "
                                f"({container.attrs['State'].get('Error') or container.status}); "
                                f"see `docker logs {name}`")
        entry.update(self._shape(spec, pid))
        if self.spec.agents == "forked":
            handle = ForkedAgentHandle(self, spec.device, container, nsjoin.target(pid))
        else:
            handle = ContainerHandle(self, spec.device, container)
            procs.wait_blocked(pid, signal.SIGTERM)   # the gate holds SIGTERM: from here none is lost
            (self.gate_dir / str(spec.device)).touch()
        self._quota_pending[spec.device] = self.cpus_now(spec.device)
        return handle

    def handle_of(self, device: int) -> Optional[ContainerHandle]:
        return next((h for h in self.handles if h.device == device), None)

    def _reshaped(self, spec: AgentSpec, handle, gate) -> int:
        """After a (re)start: the record follows the new pid and interfaces, the qdiscs are installed
        again, then the gate opens. → the new pid."""
        entry = self.record["containers"][str(spec.device)]
        handle.container.reload()
        pid = handle.container.attrs["State"]["Pid"]
        if not pid:
            raise RuntimeError_(f"device {spec.device}: container {entry['name']} did not restart; "
                                f"see `docker logs {entry['name']}`")
        peak = self._uplink_peaks.pop(spec.device, None)   # measured again on the new veth
        with self._lock:
            entry.setdefault("uplink_peaks_bps", []).append(round(peak.peak_bps) if peak is not None else None)
            entry["pid"] = pid
            entry["restarts"] = entry.get("restarts", 0) + 1
            entry.update(self._shape(spec, pid))
        handle.returncode = None
        handle.away = False
        procs.wait_blocked(pid, signal.SIGTERM)
        # the gate file holds the attempt its hello says (AgentSpec.attempt), whole before the gate sees it
        with replacing(gate) as tmp:
            tmp.write_text(f"{spec.attempt(entry['restarts'])}\n")
        self._save()
        return pid

    def restart_device(self, spec: AgentSpec, stop_timeout: int = 0) -> int:
        """Restart device ``spec.device``'s container (``agents: container``): it gets a new network
        namespace and veth, so the qdiscs are installed again — the agent waits at its gate until
        they are, as at the first start — and its quota stays (a container setting). → the new pid.
        Restarting loses the links' qdiscs under Containernet-style set-ups; here the record of the
        run's containers (pid, interfaces, qdiscs) follows the restart, so cleanup finds them."""
        if self.spec.agents != "container":
            raise RuntimeError_("restart_device needs runtime.docker.agents: container")
        handle = next(h for h in self.handles if h.device == spec.device)
        gate = self.gate_dir / str(spec.device)
        gate.unlink(missing_ok=True)   # the restarted agent waits until its links are shaped again
        self.sample_counters(force=True)
        self._counter_base[spec.device] = dict(self._counters.get(spec.device, {}))
        handle.container.restart(timeout=stop_timeout)
        return self._reshaped(spec, handle, gate)

    def _fork_agents(self, specs: list[AgentSpec], handles: list) -> None:
        """``agents: forked``: fork each agent from the preloaded fork server into its container."""
        from ..forkserver import fork_agent
        log_dir = self.run_dir / "logs"
        log_dir.mkdir(exist_ok=True)
        for spec, h in zip(specs, handles):
            h.proc = fork_agent(spec, str(log_dir / f"agent-{spec.device:04d}.log"), {},
                                prepare=(nsjoin.enter, h.join))
            self.record["containers"][str(spec.device)]["agent_pid"] = h.proc.pid
        self._save()

    def _shape(self, spec: AgentSpec, pid: int) -> dict:
        inner, peer, peer_name = links.veth_peer(pid)
        out = {"eth0": inner, "host_veth": peer, "host_ifname": peer_name, "qdiscs": []}
        uplink, downlink = self.link_profile(spec.device, "uplink"), self.link_profile(spec.device, "downlink")
        up = links.shape(inner, uplink, netns=pid)
        out["uplink"] = up.levels
        if up.qdisc:
            out["qdiscs"].append({"where": "container eth0", "netns_pid": pid, "ifindex": inner, "kind": up.qdisc})
        if self.spec.shape_downlink:
            down = links.shape(peer, downlink)
            out["downlink"] = down.levels
            if down.qdisc:
                out["qdiscs"].append({"where": "host veth", "ifname": peer_name, "ifindex": peer,
                                      "kind": down.qdisc})
        if self.trace is not None:   # the rates in force (a trace's), as live changes record them
            out["uplink_rate_bps"], out["downlink_rate_bps"] = uplink.rate, downlink.rate
        return out

    # -- during the run -----------------------------------------------------------------------
    def _set_quota(self, handle, device: int, cpus: float) -> None:
        handle.container.update(cpu_period=100_000, cpu_quota=max(1000, int(cpus * 100_000)))
        self.record["containers"][str(device)]["cpus"] = cpus

    def _list_status(self) -> dict[str, str]:
        listed = self.client.containers.list(all=True, sparse=True, filters={"label": self.label})
        return {c.id: c.attrs.get("State", "") for c in listed}

    def sample_counters(self, force: bool = False) -> None:
        """Remember the latest kernel counters of each device's host-side veth (one netlink dump).

        A container's veth disappears when it exits, so the last sample before that is what counts."""
        if not self._sample_due(force):
            return
        now = self._counter_at
        wanted = {c["host_veth"]: int(d) for d, c in self.record["containers"].items() if "host_veth" in c}
        if not wanted:
            return
        with links.iproute() as ipr:
            for msg in ipr.get_links():
                d = wanted.get(msg["index"])
                if d is None:
                    continue
                st = msg.get_attr("IFLA_STATS64")
                base = self._counter_base.get(d, {})   # what its earlier veths counted (restarts)
                # host veth rx = bytes the container sent (uplink); tx = bytes it received (downlink)
                c = {"uplink_bytes": int(st["rx_bytes"]), "downlink_bytes": int(st["tx_bytes"]),
                     "uplink_packets": int(st["rx_packets"]), "downlink_packets": int(st["tx_packets"])}
                self._counters[d] = {k: v + base.get(k, 0) for k, v in c.items()}
                self._uplink_peaks.setdefault(d, PeakRate()).add(now, self._counters[d]["uplink_bytes"])

    def kernel_traffic(self) -> dict:
        """On-the-wire bytes (Ethernet + IP + TCP + payload) per device, per class and at the PS."""
        per_class: dict = {}
        for d, c in self._counters.items():
            k = self.record["containers"][str(d)]["class"]
            agg = per_class.setdefault(k, {"uplink_bytes": 0, "downlink_bytes": 0, "devices": 0})
            agg["uplink_bytes"] += c["uplink_bytes"]
            agg["downlink_bytes"] += c["downlink_bytes"]
            agg["devices"] += 1
        ps = None
        net = self.record.get("network")
        if net and self._bridge_start is not None:
            try:
                now = links.counters(links.ifindex(net["bridge"]))
                # the bridge is the PS's interface: its rx is what the host (PS) received from devices
                ps = {"ingress_bytes": now["rx_bytes"] - self._bridge_start["rx_bytes"],
                      "egress_bytes": now["tx_bytes"] - self._bridge_start["tx_bytes"],
                      "interface": net["bridge"]}
            except links.LinkError:
                ps = None
        return {"source": "kernel interface counters (host-side veth per device, bridge for the PS)",
                "sampled_every_s": COUNTER_EVERY,
                "devices": {str(d): c for d, c in sorted(self._counters.items())},
                "classes": per_class, "ps": ps, "host_cpu": self.host_cpu()}

    def fidelity(self) -> dict:
        return self._with_restart_peaks(super().fidelity())

    # -- teardown -----------------------------------------------------------------------------
    def cleanup(self) -> None:
        if self.network is None and not self.handles:
            return
        self._write_kernel_traffic()
        self._note_peaks()
        for h in self.handles:           # forked agents are host processes: end them first
            if isinstance(h, ForkedAgentHandle) and h.poll() is None:
                h.kill()
        self._save_logs()
        self._save()
        report = clean_docker(self.run_id, client=self.client, record=self.record)
        self.record["cleanup"] = report
        self._save()
        if report.get("leaked"):   # said on the console and in summary.json, not only in docker.json
            self.leaked = report["leaked"]
            warn(leak_advice(self.run_dir, report["leaked"], phantom=bool(report.get("phantom"))))
        self.network = None
        self.handles = []

    def _save_logs(self) -> None:
        log_dir = self.run_dir / "logs"
        log_dir.mkdir(exist_ok=True)

        def save(h):
            try:
                (log_dir / f"agent-{h.device:04d}.log").write_bytes(h.container.logs())
            except Exception:
                pass
        with ThreadPoolExecutor(8) as pool:   # forked agents wrote their log files themselves
            list(pool.map(save, [h for h in self.handles if not isinstance(h, ForkedAgentHandle)]))
