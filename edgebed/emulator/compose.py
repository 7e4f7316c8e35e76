"""Compose export: a scenario as a docker compose project (PS + one service per device) to run
without edgebed's engine on the host — ``docker compose up`` on any machine with Docker.

Layout written to ``out_dir``::

    docker-compose.yml   ps + agent-NNNN services on an internal network, CPU/memory limits per class
    scenario.yaml        the resolved scenario the PS reads

The PS service runs ``python -m edgebed.emulator.compose serve``: the same engine and PS, with agents
that compose started (``ComposeRuntime``). Each agent service's first step shapes its own ``eth0``
egress with tbf (``python -m edgebed.emulator.links shape``, needs NET_ADMIN) and then execs the agent.
Delay, jitter and loss are applied by the agent (application level), downlinks are not shaped (their
host-side veth is out of a container's reach), a crash is enforced by the PS's protocol (it rejects a
frozen device), not by the freezer.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import yaml

from ..scenario import Scenario, class_assignment
from . import images
from .runtimes.base import AgentHandle, AgentSpec, Capabilities, Runtime

PS_PORT = 5555
SCENARIO_IN_CONTAINER = "/edgebed/scenario.yaml"
RUNS_IN_CONTAINER = "/edgebed/runs"


def _cpus(sc: Scenario, klass, docker_spec: dict) -> float:
    cpus = (docker_spec.get("cpus") or {}).get(klass.name)
    return float(cpus) if cpus is not None else float(docker_spec.get("base_cpus", 1.0)) / klass.slowdown


def compose_dict(sc: Scenario, offline: bool = False, context: str = "..") -> dict:
    """The compose project as a dict (compose file format 2.4: cpus/mem_limit without swarm)."""
    dspec = dict(sc.runtime.docker)
    if offline:
        info = images.offline_info()
        image, python = info.name, info.python
        mounts = [f"{h}:{m['bind']}:ro" for h, m in info.mounts.items()]
        env = dict(info.env)
    else:
        image, python, mounts = dspec.get("image") or images.DOCKERFILE_IMAGE, "python", []
        env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    labels = {images.LABEL: "1", f"{images.LABEL}.scenario": sc.name}
    ps = {
        "image": image,
        "command": [python, "-m", "edgebed.emulator.compose", "serve", SCENARIO_IN_CONTAINER,
                    "--bind", f"tcp://0.0.0.0:{PS_PORT}", "--out", RUNS_IN_CONTAINER],
        "volumes": mounts + [f"./scenario.yaml:{SCENARIO_IN_CONTAINER}:ro", f"./runs:{RUNS_IN_CONTAINER}"],
        "environment": dict(env), "networks": ["edgebed"], "labels": dict(labels), "working_dir": "/tmp",
    }
    if not offline:
        ps["build"] = {"context": context, "dockerfile": "Dockerfile"}
    services = {"ps": ps}
    assign = class_assignment(sc)
    for d in range(sc.workers.n):
        klass = sc.workers.classes[assign[d]]
        agent = [python, "-m", "edgebed.device_agent", "--ps", f"tcp://ps:{PS_PORT}", "--device", str(d)]
        cmd = agent
        if klass.uplink.rate is not None:
            cmd = [python, "-m", "edgebed.emulator.links", "shape", "--dev", "eth0",
                   "--rate", f"{klass.uplink.rate:.0f}", "--", *agent]
        svc = {
            "image": image, "command": cmd, "depends_on": ["ps"], "networks": ["edgebed"],
            "environment": {**env, "EDGEBED_CLASS": klass.name, "EDGEBED_CPU_QUOTA": "1"},
            "cpus": round(_cpus(sc, klass, dspec), 4),
            "labels": {**labels, f"{images.LABEL}.device": str(d), f"{images.LABEL}.class": klass.name},
            "working_dir": "/tmp",
        }
        if klass.uplink.rate is not None:
            svc["cap_add"] = ["NET_ADMIN"]     # for the tc init step on its own eth0
        if mounts:
            svc["volumes"] = list(mounts)
        if dspec.get("memory"):
            svc["mem_limit"] = dspec["memory"]
        services[f"agent-{d:04d}"] = svc
    return {"version": "2.4", "services": services,
            "networks": {"edgebed": {"driver": "bridge", "internal": True, "labels": dict(labels)}}}


def export_compose(sc: Scenario, out_dir: str | Path, offline: bool = False, context: Optional[str] = None) -> Path:
    """Write the compose project for ``sc`` into ``out_dir``; returns the compose file's path.

    ``offline`` uses the offline image with this host's read-only mounts (runs here, not portable);
    otherwise the image is built from the repository's Dockerfile (``context`` = path of the repository
    relative to ``out_dir``, by default computed from where the project lives)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if context is None:
        import os
        context = os.path.relpath(images.PROJECT_ROOT, out.resolve())
    data = compose_dict(sc, offline=offline, context=context)
    # Only what was set: a full dump (defaults included) does not always load back (see final note).
    (out / "scenario.yaml").write_text(yaml.safe_dump(sc.model_dump(mode="json", exclude_unset=True),
                                                      sort_keys=False))
    (out / "runs").mkdir(exist_ok=True)
    (out / "runs" / ".gitignore").write_text("*\n!.gitignore\n")
    path = out / "docker-compose.yml"
    header = (f"# Generated by edgebed from scenario {sc.name!r}: {sc.workers.n} devices, "
              f"{len(sc.workers.classes)} speed classes.\n"
              "# Run: docker compose up -d && docker wait $(docker compose ps -q ps); docker compose down\n"
              "# (not --abort-on-container-exit: a crashed device's agent ends early by design)\n"
              "# Uplink rate: tbf on each agent's eth0 (NET_ADMIN); delay/jitter/loss: in the agent;\n"
              "# downlinks unshaped; crashes enforced by the PS protocol. Results: ./runs/\n")
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120))
    return path


def validate(data: dict, sc: Scenario) -> list[str]:
    """Structural checks of a compose dict against its scenario (empty list: fine)."""
    problems = []
    services = data.get("services", {})
    agents = sorted(k for k in services if k.startswith("agent-"))
    if "ps" not in services:
        problems.append("no ps service")
    if len(agents) != sc.workers.n:
        problems.append(f"{len(agents)} agent services for workers.n={sc.workers.n}")
    if not data.get("networks", {}).get("edgebed", {}).get("internal"):
        problems.append("network edgebed is not internal")
    for name in agents:
        s = services[name]
        if "ps" not in s.get("depends_on", []):
            problems.append(f"{name} does not depend on ps")
        if "links" in s.get("command", [])[:4] and "NET_ADMIN" not in s.get("cap_add", []):
            problems.append(f"{name} shapes eth0 without NET_ADMIN")
        if not (0 < float(s.get("cpus", 0)) <= 64):
            problems.append(f"{name}: cpus {s.get('cpus')!r}")
    return problems


# --- the PS side of a compose project -------------------------------------------------------------

class _ExternalHandle(AgentHandle):
    """An agent compose started: the PS only sees it through the protocol."""

    def __init__(self, device: int):
        self.device = device
        self.returncode: Optional[int] = None

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        return self.returncode

    def send_signal(self, sig):
        self.returncode = -int(sig)      # it ends by itself on the PS's Stop; nothing to signal

    def kill(self):
        self.send_signal(9)

    def freeze(self):
        pass                              # the PS rejects a frozen device's messages


class ComposeRuntime(Runtime):
    """Agents started by docker compose; the engine in the PS container only serves them."""
    name = "docker"
    capabilities = Capabilities(link_rate="kernel", link_delay="app", link_jitter="app", link_loss="app",
                                cpu_quota=True, freeze="protocol")

    def __init__(self, scenario, run_dir, bind: str = f"tcp://0.0.0.0:{PS_PORT}"):
        self.scenario = scenario
        self.run_dir = Path(run_dir)
        self.bind = bind
        self.spec = None
        self.handles: dict[int, _ExternalHandle] = {}

    def ps_bind(self) -> str:
        return self.bind

    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        self.handles = {s.device: _ExternalHandle(s.device) for s in specs}
        return list(self.handles.values())

    def drive(self, ps, seconds: float) -> None:
        with ps.lock:   # the serve thread adds devices meanwhile (hello burst): read a snapshot
            gone = [d for d, st in ps.devices.items() if st.session not in ps.sessions]   # said bye
        for d in gone:
            h = self.handles.get(d)
            if h is not None and h.returncode is None:
                h.returncode = 0
        time.sleep(seconds)


def serve(scenario_path: str, bind: str, out: str) -> int:
    """Entry point of the compose PS service: run the engine with compose-started agents."""
    from ..scenario import load_scenario
    from . import engine as engine_mod
    sc = load_scenario(scenario_path)
    # The engine looks runtimes up by the scenario's name; here the agents are compose's.
    engine_mod.get_runtime = lambda name: (lambda scenario, run_dir: ComposeRuntime(scenario, run_dir, bind))
    res = engine_mod.Engine(sc, out=out, progress=engine_mod.terminal_progress(sys.stdout, 5.0),
                            source=scenario_path).run()
    print(f"edgebed: run {res.summary['status']}: {res.summary.get('updates')} updates -> {res.path}")
    return 0 if res.summary["status"] == "complete" else 1


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m edgebed.emulator.compose")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the PS of a compose project")
    s.add_argument("scenario")
    s.add_argument("--bind", default=f"tcp://0.0.0.0:{PS_PORT}")
    s.add_argument("--out", default=RUNS_IN_CONTAINER)
    e = sub.add_parser("export", help="write a compose project for a scenario")
    e.add_argument("scenario")
    e.add_argument("out_dir")
    e.add_argument("--offline", action="store_true", help="offline image + this host's mounts")
    args = ap.parse_args(argv)
    if args.cmd == "serve":
        return serve(args.scenario, args.bind, args.out)
    from ..scenario import load_scenario
    print(export_compose(load_scenario(args.scenario), args.out_dir, offline=args.offline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
