"""Compose export: a scenario as a docker compose project (PS + one service per device) to run
without edgebed's engine on the host — ``docker compose up`` (v2) or ``docker-compose up`` (v1) on
any machine with Docker, needing nothing from this one.

Layout written to ``out_dir``::

    docker-compose.yml   ps + agent-NNNN services on an internal network, CPU/memory limits per class
    scenario.yaml        the resolved scenario the PS reads
    build/               the image's build context: Dockerfile, pyproject.toml, edgebed/ (a copy)
    runs/                where the PS writes the run directory
    docker-compose.override.yml   only with ``--offline``: this host's offline image and read-only
                         mounts (compose merges it; delete it to build the portable image instead)

The PS service runs ``python -m edgebed.cli compose serve``: the same engine and PS, with agents
that compose started (``ComposeRuntime``). Each shaped agent service's first step shapes its own
``eth0`` (``python -m edgebed.emulator.runtimes.docker.links shape``, needs NET_ADMIN): egress with tbf (uplink) and
ingress through an ifb device with tbf (downlink), then execs the agent. Delay, jitter and loss are
applied by the agent (application level); a crash is enforced by the PS's protocol (it rejects a
frozen device), not by the freezer.
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import yaml

from pydantic import BaseModel, ConfigDict, Field

from .... import __version__, numerics
from ....data.bounded import environment as limits_environment
from ....scenario import Scenario, class_assignment
from . import images
from ..base import AgentHandle, AgentSpec, Capabilities, Runtime
from .runtime import DockerSpec, cpus_for

PS_PORT = 5555
SCENARIO_IN_CONTAINER = "/edgebed/scenario.yaml"
RUNS_IN_CONTAINER = "/edgebed/runs"


IMAGE = f"edgebed/agent:{__version__}"


def _agent_command(python: str, klass, device: int) -> list[str]:
    agent = [python, "-m", "edgebed.device_agent", "--ps", f"tcp://ps:{PS_PORT}", "--device", str(device)]
    rates = [(flag, getattr(klass, d).rate) for flag, d in (("--rate", "uplink"), ("--down-rate", "downlink"))]
    rates = [(flag, r) for flag, r in rates if r is not None]
    if not rates:
        return agent
    return [python, "-m", "edgebed.emulator.runtimes.docker.links", "shape", "--dev", "eth0",
            *[x for flag, r in rates for x in (flag, f"{r:.0f}")], "--", *agent]


def _ps_command(python: str) -> list[str]:
    return [python, "-m", "edgebed.cli", "compose", "serve", SCENARIO_IN_CONTAINER,
            "--bind", f"tcp://0.0.0.0:{PS_PORT}", "--out", RUNS_IN_CONTAINER]


def compose_dict(sc: Scenario, context: str = "./build") -> dict:
    """The portable compose project as a dict (file format 2.4: cpus/mem_limit without swarm). Every
    service names the same image and how to build it, so no service tries to pull it."""
    dspec = DockerSpec.model_validate(sc.runtime.docker or {})
    image = dspec.image or IMAGE
    build = {"context": context, "dockerfile": "Dockerfile"}
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **numerics.environment(sc.numerics),
           **limits_environment()}
    labels = {images.LABEL: "1", f"{images.LABEL}.scenario": sc.name}
    services = {"ps": {
        "image": image, "build": dict(build), "command": _ps_command("python"),
        "volumes": [f"./scenario.yaml:{SCENARIO_IN_CONTAINER}:ro", f"./runs:{RUNS_IN_CONTAINER}"],
        "environment": dict(env), "networks": ["edgebed"], "labels": dict(labels), "working_dir": "/tmp",
    }}
    assign = class_assignment(sc)
    for d in range(sc.workers.n):
        klass = sc.workers.classes[assign[d]]
        cmd = _agent_command("python", klass, d)
        svc = {
            "image": image, "build": dict(build), "command": cmd, "depends_on": ["ps"], "networks": ["edgebed"],
            "environment": {**env, **AgentSpec(d, klass.name, f"tcp://ps:{PS_PORT}").environment()},
            "cpus": round(cpus_for(klass, dspec, paced=sc.timing.pacing), 4),
            "labels": {**labels, f"{images.LABEL}.device": str(d), f"{images.LABEL}.class": klass.name},
            "working_dir": "/tmp",
        }
        if "links" in cmd[2]:
            svc["cap_add"] = ["NET_ADMIN"]     # for the tc init step on its own eth0
        if dspec.memory:
            svc["mem_limit"] = dspec.memory
        services[f"agent-{d:04d}"] = svc
    return {"version": "2.4", "services": services,
            "networks": {"edgebed": {"driver": "bridge", "internal": True, "labels": dict(labels)}}}


def offline_override(sc: Scenario) -> dict:
    """docker-compose.override.yml for this host: the offline image, its interpreter and read-only
    host mounts instead of the Dockerfile image (see images.py). Not portable, by design."""
    info = images.offline_info()
    mounts = [f"{h}:{m['bind']}:ro" for h, m in info.mounts.items()]
    base = compose_dict(sc)["services"]
    out = {}
    for name, svc in base.items():
        cmd = [info.python if c == "python" else c for c in svc["command"]]
        out[name] = {"image": info.name, "command": cmd, "volumes": list(mounts), "environment": dict(info.env)}
    return {"version": "2.4", "services": out}


def _copy_build_context(dest: Path) -> None:
    """The Dockerfile, pyproject.toml, setup.py and the edgebed package (no caches, no compiled
    extension built for this host: the image builds its own or runs the numpy path): all the build needs."""
    root = images.PROJECT_ROOT
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in ("Dockerfile", "pyproject.toml", "setup.py"):
        shutil.copy2(root / name, dest / name)
    shutil.copytree(root / "edgebed", dest / "edgebed",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", ".*"))


def export_compose(sc: Scenario, out_dir: str | Path, offline: bool = False, context: Optional[str] = None) -> Path:
    """Write the compose project for ``sc`` into ``out_dir``; returns the compose file's path.

    The image is built from a copy of the Dockerfile and the package in ``out_dir/build`` (or from
    ``context``, a path relative to ``out_dir``, e.g. the repository for the committed example).
    ``offline`` adds docker-compose.override.yml to run it here with the offline image instead."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if context is None:
        _copy_build_context(out / "build")
        context = "./build"
    data = compose_dict(sc, context=context)
    # Only what was set: a full dump (defaults included) does not always load back (see final note).
    (out / "scenario.yaml").write_text(yaml.safe_dump(sc.model_dump(mode="json", exclude_unset=True, context={"units": "write"}),
                                                      sort_keys=False))
    (out / "runs").mkdir(exist_ok=True)
    (out / "runs" / ".gitignore").write_text("*\n!.gitignore\n")
    override = out / "docker-compose.override.yml"
    if offline:
        override.write_text("# This host only: the offline image and read-only mounts of this host's Python,\n"
                            "# venv and source (edgebed image build). Delete this file to build the portable image.\n"
                            + yaml.safe_dump(offline_override(sc), sort_keys=False, width=120))
    elif override.exists():
        override.unlink()
    path = out / "docker-compose.yml"
    header = (f"# Generated by edgebed from scenario {sc.name!r}: {sc.workers.n} devices, "
              f"{len(sc.workers.classes)} speed classes.\n"
              "# Run (compose v2; v1: docker-compose): docker compose up -d && "
              "docker wait $(docker compose ps -q ps); docker compose down\n"
              "# (not --abort-on-container-exit: a crashed device's agent ends early by design)\n"
              "# Links: tbf on each agent's eth0 egress (uplink) and, through an ifb device, its ingress\n"
              "# (downlink), set by the agent's first step (NET_ADMIN); delay/jitter/loss: in the agent;\n"
              "# crashes enforced by the PS protocol. Results: ./runs/\n")
    path.write_text(header + yaml.safe_dump(data, sort_keys=False, width=120))
    return path


def compose_command() -> list[str]:
    """The compose CLI this host has: ``docker compose`` (v2) or ``docker-compose`` (v1); [] if none."""
    import shutil
    import subprocess
    if shutil.which("docker"):
        try:
            if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=20).returncode == 0:
                return ["docker", "compose"]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return ["docker-compose"] if shutil.which("docker-compose") else []


def run_hint(project: Path) -> str:
    """How to run the project, with the compose command this host actually has."""
    cmd = " ".join(compose_command())
    where = (" with this host's offline image (docker-compose.override.yml; delete it to build from "
             "build/Dockerfile)" if (Path(project) / "docker-compose.override.yml").exists() else
             " (builds the image from build/Dockerfile the first time: needs a registry for python:3.11-slim)")
    if not cmd:
        return (f"run it where Docker Compose is installed: cd {project} && docker compose up "
                "(v2) or docker-compose up (v1); neither is installed here")
    return f"run it with: cd {project} && {cmd} up{where}; results in {project}/runs/"


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


class ComposeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bind: str = Field(f"tcp://0.0.0.0:{PS_PORT}", description="endpoint the PS binds in its container")


class ComposeRuntime(Runtime):
    """Agents started by docker compose; the engine in the PS container only serves them. Selected by
    ``compose serve`` (runtime.name=compose) for a scenario written for the docker runtime."""
    name = "compose"
    Spec = ComposeSpec
    capabilities = Capabilities(link_rate="kernel", link_delay="app", link_jitter="app", link_loss="app",
                                cpu_quota=True, freeze="protocol")

    def __init__(self, scenario, run_dir):
        super().__init__(scenario, run_dir)
        self.handles: dict[int, _ExternalHandle] = {}

    def ps_bind(self) -> str:
        return self.spec.bind

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
    from ....scenario import load_resolved
    from ... import engine as engine_mod
    # The scenario was written for the docker runtime; here the agents are compose's.
    sc = load_resolved(scenario_path, ("runtime.name=compose", f"runtime.compose.bind={bind}"))
    from ....console import RunProgress, log, setup_logging
    setup_logging(0)
    res = engine_mod.Engine(sc, out=out, progress=RunProgress(sys.stdout, every=5.0, force_terminal=False),
                            source=scenario_path).run()
    log.info(f"edgebed: run {res.summary['status']}: {res.summary.get('updates')} updates -> {res.path}")
    return 0 if res.summary["status"] == "complete" else 1
