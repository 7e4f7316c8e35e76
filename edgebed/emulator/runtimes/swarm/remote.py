"""Engine side of ``runtime.swarm.agents: service``: the node agents' channel, their global service,
and a device handle that acts through its node's agent.

``AgentHub`` binds a ROUTER socket on the PS's address; one thread owns it, decodes every message
(``protocol.decode``; a malformed one is logged and dropped, never the run's end), keeps what the
agents said (hello, shaped devices, errors, task states, counters, logs, bye) and sends what the
runtime queues (setup, quota, freeze, signal, bye) plus a ping every ``PING_EVERY`` s, so an agent
whose engine died ends itself. ``agent_service`` is the Swarm service that runs one agent per node.
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from typing import Callable, Optional

from ..base import PolledHandle
from . import protocol

log = logging.getLogger("edgebed.swarm")
PING_EVERY = 2.0
SILENT_AFTER = 10.0     # an agent that sent nothing for this long (it reports every 0.5 s) is not asked
AGENT_CAPS = ["NET_ADMIN", "SYS_ADMIN"]     # tc in the tasks' namespaces; setns into them
HOST_PROC = "/host/proc"                   # where the agent container sees its node's /proc
AGENT_SOCKET = "/var/run/docker.sock"      # where the agent container sees its node's engine


class HubError(RuntimeError):
    """A node agent did not answer a request, or refused it; the message says which and why."""


class AgentHub:
    """The engine's end of the node agents' channel (bind; agents connect)."""

    def __init__(self, host: str, on_counters: Optional[Callable[[int, float, dict], None]] = None):
        import zmq
        self._zmq = zmq
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port(f"tcp://{host}")
        self.endpoint = f"tcp://{host}:{port}"
        self.on_counters = on_counters
        self.hello: dict[str, dict] = {}            # node id → its hello fields
        self.shaped: dict[int, dict] = {}           # device → swarm.json entry (with its node)
        self.errors: list[str] = []
        self.tasks: dict[int, dict] = {}            # device → {"state", "exit_code"}
        self.counters: dict[int, dict] = {}         # device → latest cumulative counters
        self.logs: dict[int, str] = {}
        self.byes: dict[str, str] = {}              # node id → reason
        self.seen: dict[str, float] = {}            # node id → when it last sent anything (monotonic)
        self.dropped = 0
        self.setup: Optional[dict] = None           # sent to every agent on hello, and when set
        self._acks: dict[int, protocol.Message] = {}
        self._req = itertools.count(1)
        self._cond = threading.Condition()
        self._out: queue.Queue = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="swarm-agent-hub", daemon=True)
        self._thread.start()

    # -- the socket's thread ------------------------------------------------------------------------------
    def _serve(self) -> None:
        next_ping = 0.0
        while not self._closed:
            try:
                if self.sock.poll(50):
                    frames = self.sock.recv_multipart()
                    self._received(frames[0], frames[1:])
                while True:
                    node, frames = self._out.get_nowait()
                    self.sock.send_multipart([node.encode(), *frames])
            except queue.Empty:
                pass
            except self._zmq.ZMQError as err:
                if self._closed:
                    break
                log.warning("node agent channel: %s", err)
            if time.monotonic() >= next_ping:
                next_ping = time.monotonic() + PING_EVERY
                for node in list(self.hello):
                    if node not in self.byes:
                        self.sock.send_multipart([node.encode(), *protocol.encode("ping")])
        self.sock.close()

    def _received(self, route: bytes, frames: list) -> None:
        try:
            node = route.decode()
            msg = protocol.decode(frames)
            if msg.kind != "hello" and node not in self.hello:
                raise protocol.ProtocolError(f"{msg.kind} before hello")
            if msg.kind == "hello" and msg["node"] != node:
                raise protocol.ProtocolError(f"hello from {msg['node']!r} on the channel of {node!r}")
            self._apply(node, msg)
        except Exception as err:       # total: whatever an agent sends, the run goes on
            self.dropped += 1
            log.warning("dropped a message from node agent %r: %s", route[:40], err)

    def _apply(self, node: str, msg: protocol.Message) -> None:
        with self._cond:
            self.seen[node] = time.monotonic()
            if msg.kind == "hello":
                self.hello[node] = dict(msg.fields)
                if self.setup is not None:
                    self._out.put((node, protocol.encode("setup", **self.setup)))
            elif msg.kind == "shaped":
                self.shaped[msg["device"]] = {**msg["entry"], "node": node}
            elif msg.kind == "error":
                self.errors.append(f"node {node[:12]}: {msg['message']}")
            elif msg.kind == "report":
                self.tasks.update(msg["tasks"])
                self.counters.update(msg["counters"])
                if self.on_counters is not None:
                    for d, c in msg["counters"].items():
                        self.on_counters(d, msg["t"], c)
            elif msg.kind == "ack":
                self._acks[msg["req"]] = msg
            elif msg.kind == "logs":
                self.logs[msg["device"]] = msg["text"]
            elif msg.kind == "bye":
                self.byes[node] = msg["reason"]
            else:
                raise protocol.ProtocolError(f"{msg.kind} is not a message an agent sends")
            self._cond.notify_all()

    # -- what the runtime asks ------------------------------------------------------------------------------
    def send_setup(self, **fields) -> None:
        protocol.encode("setup", **fields)            # checked here, in the caller's thread
        with self._cond:
            self.setup = fields
            for node in self.hello:
                self._out.put((node, protocol.encode("setup", **fields)))

    def request(self, node: str, kind: str, timeout: float = 20.0, **fields) -> None:
        """Send a request (quota, freeze, signal) to ``node``'s agent and wait for its ack."""
        silent = time.monotonic() - self.seen.get(node, 0.0)
        if node in self.byes or silent > SILENT_AFTER:
            raise HubError(f"node agent {node[:12]}: ended or silent for {silent:.0f} s; {kind} not sent")
        req = next(self._req)
        self._out.put((node, protocol.encode(kind, req=req, **fields)))
        with self._cond:
            if not self._cond.wait_for(lambda: req in self._acks, timeout):
                raise HubError(f"node agent {node[:12]}: no answer to {kind} within {timeout:.0f} s")
            ack = self._acks.pop(req)
        if not ack["ok"]:
            raise HubError(f"node agent {node[:12]}: {kind} failed: {ack['error']}")

    def wait_for(self, pred: Callable[[], bool], timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(pred, timeout)

    def bye(self, timeout: float = 20.0) -> list[str]:
        """Ask every agent to report once more, release its tasks and end; returns the nodes whose
        agent did not say bye within ``timeout``."""
        with self._cond:
            nodes = [n for n in self.hello if n not in self.byes]
        for node in nodes:
            self._out.put((node, protocol.encode("bye", reason="run ended")))
        self.wait_for(lambda: all(n in self.byes for n in nodes), timeout)
        return [n for n in nodes if n not in self.byes]

    def close(self) -> None:
        self._closed = True
        self._thread.join(5)


class RemoteTaskHandle(PolledHandle):
    """One device's task on a node the engine does not enter; mirrors Popen through that node's agent
    (state from its reports, signals and freeze as requests)."""

    def __init__(self, runtime, device: int, node: str):
        super().__init__(runtime, device)
        self.node = node

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            st = self.runtime.hub.tasks.get(self.device)
            if st is not None and st["state"] in ("exited", "dead", "removed"):
                self.returncode = st["exit_code"] if st["exit_code"] is not None else -9
        return self.returncode

    def _deliver(self, sig: int) -> None:
        try:
            self.runtime.hub.request(self.node, "signal", device=self.device, sig=sig)
        except HubError:
            pass                        # already gone

    def freeze(self) -> None:
        if self.poll() is None and not self.frozen:
            self.runtime.hub.request(self.node, "freeze", device=self.device)
            self.frozen = True
            self.runtime.note_crash(self.device)


def agent_service(mgr, rt, image, labels: dict, name: str):
    """Create the run's global service: one node agent per node that may hold tasks, on the host's
    network (it reaches the engine like any process of the node), with NET_ADMIN and SYS_ADMIN, the
    host's /proc at HOST_PROC and the node's engine socket (``runtime.swarm.node_socket``, templated
    by Swarm per node) at AGENT_SOCKET. No ``--privileged`` or ``--pid host`` needed (Swarm offers
    neither): a bind-mounted host procfs shows the node's pids, and setns needs only SYS_ADMIN."""
    from docker.types import Mount, RestartPolicy, ServiceMode
    mounts = [Mount(m["bind"], src, type="bind", read_only=True) for src, m in image.mounts.items()]
    mounts += [Mount(HOST_PROC, "/proc", type="bind", read_only=True),
               Mount(AGENT_SOCKET, rt.spec.node_socket, type="bind")]
    env = {**image.env, "EDGEBED_NODE_ID": "{{.Node.ID}}", "EDGEBED_TASK": "{{.Task.Name}}"}
    cmd = [image.python, "-m", "edgebed.emulator.runtimes.swarm.node_agent", "--engine", rt.hub.endpoint,
           "--run", rt.run_id, "--docker", f"unix://{AGENT_SOCKET}", "--proc", HOST_PROC]
    return mgr.services.create(
        image.name, command=cmd, name=name, labels=labels,
        container_labels={**labels, "edgebed.role": "node-agent"},
        env=[f"{k}={v}" for k, v in env.items()], mounts=mounts, workdir="/tmp", networks=["host"],
        mode=ServiceMode("global"), restart_policy=RestartPolicy(condition="none"),
        constraints=rt.spec.constraints or None, cap_add=AGENT_CAPS)
