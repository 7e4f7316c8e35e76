"""Node agent (``runtime.swarm.agents: service``): the link agent as a process on its own swarm node.

The run's global service starts one per node (``remote.agent_service``) with ``NET_ADMIN`` and
``SYS_ADMIN``, the host's ``/proc`` at ``--proc`` and its node's engine socket at ``--docker``. It
connects to the engine's ROUTER socket (``protocol.py``), says ``hello`` and, once it got ``setup``,
does for the run's tasks on its node what the in-engine agent does (``LinkAgent``, the same code):
shapes each task as soon as its node's engine lists it running, opens its gate, and reports
``shaped``; every ``report_every`` seconds it reports each task's state and kernel byte counters; it
sets quotas, freezes (``docker pause``) and signals tasks on request. At the end (the engine's
``bye``, SIGTERM from the service's removal, or the engine silent for ``--silence`` s) it reports
once more, sends each task's output, removes its frozen tasks (Swarm's stop of a paused container
waits out the stop grace period first), drops its namespace sockets and says ``bye``.

    python -m edgebed.emulator.runtimes.swarm.node_agent --engine tcp://HOST:PORT --run RUN_ID \\
        [--docker unix:///var/run/docker.sock] [--proc /host/proc] [--silence 30]
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from typing import Optional

from ..docker.clean import RUN_LABEL
from . import protocol
from .agent import LinkAgent

log = logging.getLogger("edgebed.node_agent")
SCAN_EVERY = 0.2        # seconds between listings of the node's tasks while some are unshaped
PING_EVERY = 2.0        # the engine's ping period (remote.py); silence is counted in these


class NodeAgent:
    """One node's agent process; ``run()`` is its loop."""

    def __init__(self, engine: str, run_id: str, docker_url: str, proc_root: str, silence: float = 30.0):
        import zmq
        self.link = LinkAgent(docker_url, f"{RUN_LABEL}={run_id}", proc_root)
        want = os.environ.get("EDGEBED_NODE_ID")
        if want and want != self.link.node_id:
            raise SystemExit(f"node agent: {docker_url} is the engine of node {self.link.node_id}, not of this "
                             f"task's node {want}; set runtime.swarm.node_socket to each node's own socket")
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.ROUTING_ID, self.link.node_id.encode())
        self.sock.setsockopt(zmq.LINGER, 5000)
        self.sock.connect(engine)
        self.silence = silence
        self.services: dict[str, list[int]] = {}     # service name → device of each slot (1-based)
        self.classes: dict = {}                      # service name → SpeedClass
        self.ps_host = ""
        self.downlink = True
        self.report_every = 0.5
        self.devices: dict[int, str] = {}            # device → its container id, once shaped
        self.failed: set[int] = set()
        self.frozen: set[int] = set()
        self.exit_codes: dict[str, int] = {}
        self.stop: Optional[str] = None

    def send(self, kind: str, **fields) -> None:
        self.sock.send_multipart(protocol.encode(kind, **fields))

    def run(self) -> int:
        self.send("hello", node=self.link.node_id, container=os.environ.get("EDGEBED_TASK", ""),
                  version=1)
        heard = time.monotonic()
        next_scan = next_report = 0.0
        while self.stop is None:
            if self.sock.poll(50):
                frames = self.sock.recv_multipart()
                heard = time.monotonic()
                self.handle(frames)
            now = time.monotonic()
            if self.services and now >= next_scan and len(self.devices) + len(self.failed) < self._wanted():
                self.shape_new()
                next_scan = now + SCAN_EVERY
            if self.services and now >= next_report:
                self.report()
                next_report = now + self.report_every
            if now - heard > self.silence:
                self.stop = f"the engine was silent for {self.silence:.0f} s"
        self.finish(self.stop)
        return 0

    # -- the engine's messages ----------------------------------------------------------------------
    def handle(self, frames: list) -> None:
        try:
            msg = protocol.decode(frames)
        except protocol.ProtocolError as err:
            log.warning("dropped a malformed message: %s", err)
            return
        handler = getattr(self, f"on_{msg.kind}", None)
        if handler is None:
            log.warning("dropped a %s message: not one the engine sends", msg.kind)
            return
        try:
            handler(msg)
        except Exception as err:       # one failed request is answered, never the agent's end
            log.warning("%s failed: %s", msg.kind, err)
            if "req" in msg.fields:
                self.send("ack", req=msg["req"], ok=False, error=str(err))
            else:
                self.send("error", message=f"{msg.kind}: {err}", device=None)

    def on_setup(self, msg) -> None:
        from ....scenario import SpeedClass
        services, classes = {}, {}
        for s in msg["services"]:
            if not (isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("class"), str)
                    and isinstance(s.get("devices"), list) and all(type(d) is int for d in s["devices"])):
                raise ValueError(f"setup: bad service entry {str(s)[:200]}")
            classes[s["name"]] = SpeedClass.model_validate(msg["classes"][s["class"]])
            services[s["name"]] = s["devices"]
        self.services, self.classes = services, classes
        self.ps_host, self.downlink, self.report_every = msg["ps_host"], msg["downlink"], max(0.1, msg["report_every"])
        log.info("setup: %d services, PS at %s", len(services), self.ps_host)

    def on_ping(self, msg) -> None:
        pass

    def on_bye(self, msg) -> None:
        self.stop = "the engine said bye"

    def _container(self, device: int):
        return self.link.client.containers.get(self.devices[device])

    def on_quota(self, msg) -> None:
        LinkAgent.set_quota(self._container(msg["device"]), msg["cpus"])
        self.send("ack", req=msg["req"], ok=True, error="")

    def on_freeze(self, msg) -> None:
        self._container(msg["device"]).pause()
        self.frozen.add(msg["device"])
        self.send("ack", req=msg["req"], ok=True, error="")

    def on_signal(self, msg) -> None:
        self._container(msg["device"]).kill(signal=msg["sig"])
        self.send("ack", req=msg["req"], ok=True, error="")

    # -- this node's tasks ----------------------------------------------------------------------------
    def _wanted(self) -> int:
        return sum(len(d) for d in self.services.values())

    def shape_new(self) -> None:
        for task in self.link.tasks():
            devs = self.services.get(task.service)
            if devs is None or not 1 <= task.slot <= len(devs) or task.status != "running":
                continue
            d = devs[task.slot - 1]
            if d in self.devices or d in self.failed:
                continue
            try:
                entry = self.link.prepare(d, task.container_id, self.classes[task.service], self.ps_host,
                                          self.downlink)
            except Exception as err:
                self.failed.add(d)
                self.send("error", message=f"device {d} on node {self.link.node_id[:12]}: {err}", device=d)
                continue
            self.devices[d] = task.container_id
            entry.update(service=task.service, slot=task.slot,
                         shaped_by={"mode": "service", "node": self.link.node_id,
                                    "task": os.environ.get("EDGEBED_TASK", ""), "pid": os.getpid()})
            self.send("shaped", device=d, entry=entry)

    def report(self) -> None:
        try:
            states = self.link.states()
        except Exception as err:
            log.warning("could not list tasks: %s", err)
            return
        tasks = {}
        for d, cid in self.devices.items():
            st = states.get(cid, "removed")
            if st in ("exited", "dead") and cid not in self.exit_codes:
                try:
                    self.exit_codes[cid] = int(self.link.client.containers.get(cid).attrs["State"]["ExitCode"])
                except Exception:
                    self.exit_codes[cid] = -9
            tasks[str(d)] = {"state": st, "exit_code": self.exit_codes.get(cid)}
        counters = {str(d): c for d, c in self.link.counters().items()}
        self.send("report", t=time.monotonic(), tasks=tasks, counters=counters)

    def finish(self, reason: str) -> None:
        log.info("ending: %s", reason)
        if self.services:
            self.report()
        for d, cid in self.devices.items():
            try:
                out = self.link.client.containers.get(cid).logs()[-protocol.LOG_TAIL:]
                self.send("logs", device=d, text=out.decode(errors="replace"))
            except Exception:
                pass
        for d in self.frozen:
            try:
                self._container(d).remove(force=True)
            except Exception:
                pass
        for d in list(self.devices):
            self.link.unshape(d)
        self.link.close()
        self.send("bye", reason=reason)
        self.sock.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgebed.emulator.runtimes.swarm.node_agent",
                                 description="edgebed's link agent on one swarm node (runtime.swarm.agents: service)")
    ap.add_argument("--engine", required=True, help="the engine's agent endpoint, tcp://HOST:PORT")
    ap.add_argument("--run", required=True, help="run id: tasks labelled edgebed.run=<id> are this run's")
    ap.add_argument("--docker", default="unix:///var/run/docker.sock", help="this node's engine")
    ap.add_argument("--proc", default="/proc", help="where the node's procfs is mounted")
    ap.add_argument("--silence", type=float, default=30.0, help="end after this many seconds without the engine")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s node-agent %(levelname)s %(message)s")
    agent = NodeAgent(args.engine, args.run, args.docker, args.proc, args.silence)

    def on_term(signum, frame):
        agent.stop = f"signal {signum}"
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
