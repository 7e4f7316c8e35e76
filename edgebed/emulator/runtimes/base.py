"""Runtime interface: where and how device agents run (processes, containers, Spark tasks, events).

A runtime is handed ``AgentSpec``s by the engine and returns ``AgentHandle``s that mirror
``subprocess.Popen`` (``poll``, ``wait``, ``send_signal``, ``kill``) plus ``freeze`` for fail-stop
crashes. It declares its ``Capabilities`` so the engine refuses a scenario it can't honour before
anything starts, reports in ``applied()`` which link property it applied at which level, for the
manifest, and declares how messages reach the PS (``transport``) and what time it is (``clock``,
``transport.py``). The engine's run loop is the only caller of every method here.
"""
from __future__ import annotations

import signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from ...scenario import Scenario
from .transport import SocketTransport, WallClock


class RuntimeError_(RuntimeError):
    """A runtime that can't start: the message says what is missing and how to get it."""


@dataclass(frozen=True)
class Capabilities:
    # Level at which each link property can be applied: "kernel", "app" (in the agent's send path),
    # "model" (computed by a virtual clock) or "none" (ignored; a scenario asking for it is refused).
    link_rate: str = "none"
    link_delay: str = "none"
    link_jitter: str = "none"
    link_loss: str = "none"
    cpu_quota: bool = False          # speed classes enforced by CPU quotas (else by sleeping)
    freeze: str = "signal"           # how fail-stop is enforced: signal | pause | protocol | model
    max_agents: Optional[int] = None
    curve: bool = False              # can hand devices their CURVE keys (security.curve)
    # Parts of the scenario's ``dynamics:`` it applies (``DynamicsSpec.parts``: availability, recovery,
    # trace, event:link, event:partition, event:ps-link, ps-link); a scenario asking for another is refused.
    dynamics: frozenset = frozenset()
    cuda: bool = False               # can put its devices' torch on a CUDA GPU (scenario device: cuda)


def cuda_problems(device: str, runtime: str, supported: bool) -> list[str]:
    """Why ``device: cuda`` can't run here (empty: it can, or the scenario asks for the CPU)."""
    if device != "cuda":
        return []
    if not supported:
        return [f"device: cuda: the {runtime} runtime gives its devices no GPU; use runtime local, sim or "
                "spark, or device: cpu"]
    import torch
    if not torch.cuda.is_available():
        built = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return [f"device: cuda: torch {torch.__version__} ({built}) sees no CUDA device on this machine "
                "(torch.cuda.is_available() is False); set device: cpu, or run on a machine with an NVIDIA "
                "GPU and a CUDA build of torch"]
    return []


@dataclass
class AgentSpec:
    """What the engine asks a runtime to start: one device agent."""
    device: int
    speed_class: str
    ps_address: str                   # endpoint the agent connects to, e.g. tcp://127.0.0.1:5555
    env: dict = field(default_factory=dict)

    def environment(self) -> dict:
        """The agent's environment variables: ``env`` and its speed class (the one way it learns it
        before the PS's Welcome)."""
        return {**self.env, "EDGEBED_CLASS": self.speed_class}

    def attempt(self, restarts: int) -> int:
        """The attempt the device's hello says after ``restarts`` restarts of its agent (churn, crash
        recovery): the run's (``EDGEBED_ATTEMPT``) plus those, as on the virtual clock, where a device
        that returns says hello with attempt + 1."""
        return int(self.env.get("EDGEBED_ATTEMPT", 0)) + restarts


class AgentHandle(ABC):
    """A running agent; mirrors subprocess.Popen. Called by the engine's run loop only."""

    device: int

    @abstractmethod
    def poll(self) -> Optional[int]:
        """Exit code if the agent ended, else None (a frozen agent is still running)."""

    @abstractmethod
    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Block until the agent ends or timeout; returns poll()."""

    @abstractmethod
    def send_signal(self, sig: int) -> None: ...

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    @abstractmethod
    def kill(self) -> None:
        """End the agent for good, frozen or not."""

    @abstractmethod
    def freeze(self) -> None:
        """Fail-stop: the agent never runs again (SIGSTOP, docker pause, ...)."""


class PolledHandle(AgentHandle):
    """A handle whose agent's state is read from outside (a container, a task on another node): it
    keeps the exit code once seen and whether the agent was frozen; ``wait`` polls every 50 ms."""

    def __init__(self, runtime, device: int):
        self.runtime = runtime
        self.device = device
        self.frozen = False
        self.returncode: Optional[int] = None

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None and (end is None or time.monotonic() < end):
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        if self.frozen:
            # A frozen device is dead for the run; a signal must not thaw it (docker may unpause to
            # deliver one), so any stop request ends it outright.
            sig = signal.SIGKILL
        self._deliver(int(sig))

    @abstractmethod
    def _deliver(self, sig: int) -> None:
        """Send ``sig`` to the running agent; nothing if it is gone already."""

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        self.wait(10)


def unknown_classes(scenario: Scenario, section: str, keys) -> list[str]:
    """Problems for the keys of a per-speed-class mapping (``section``, e.g. runtime.docker.cpus) that
    name no speed class of the scenario."""
    names = {c.name for c in scenario.workers.classes}
    return [f"{section}.{k}: no speed class named {k!r} (classes: {', '.join(sorted(names))})"
            for k in keys if k not in names]


class NoSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Runtime(ABC):
    """One way of running agents. Subclasses set ``name``, ``capabilities`` and ``Spec``."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    Spec: ClassVar[type[BaseModel]] = NoSpec   # validates scenario.runtime.<name>
    # Seconds of one SGD step at slowdown 1 where the runtime decides it itself (the virtual clock:
    # runtime.sim.step_time); None where the devices' real compute takes its time.
    step_time: Optional[float] = None
    # Time dilation the runtime's own link model applies (the virtual clock's kernel-rate links:
    # runtime.sim.dilation); real-time runtimes are dilated through the scenario instead.
    dilation: float = 1.0

    def __init__(self, scenario: Scenario, run_dir: Path):
        self.scenario = scenario
        self.run_dir = Path(run_dir)
        self.clock = self.make_clock()
        try:
            self.spec = self.Spec.model_validate(getattr(scenario.runtime, self.name.replace("-", "_"), {}) or {})
        except ValidationError as err:
            from ...scenario import ScenarioError, format_errors
            raise ScenarioError(format_errors(err, scenario.name, prefix=f"runtime.{self.name}")) from None

    def check(self) -> list[str]:
        """Problems that make this scenario impossible on this runtime (empty list: fine).

        The default compares every non-trivial link property against ``capabilities``."""
        problems = []
        caps = self.capabilities
        for cls in self.scenario.workers.classes:
            for direction in ("uplink", "downlink"):
                link = getattr(cls, direction)
                asked = {"link_rate": link.rate is not None, "link_delay": link.delay > 0,
                         "link_jitter": link.jitter > 0, "link_loss": link.loss > 0}
                for prop, wanted in asked.items():
                    if wanted and getattr(caps, prop) == "none":
                        problems.append(f"workers.classes.{cls.name}.{direction}.{prop[5:]}: runtime "
                                        f"{self.name!r} can't apply it; remove it or choose another runtime")
        if self.scenario.security.curve and not caps.curve:
            problems.append(f"security.curve: the {self.name} runtime can't hand devices their keys yet; "
                            "use runtime local or set security.curve: false")
        for part in self.scenario.dynamics.parts():
            if part not in caps.dynamics:
                problems.append(f"dynamics: {part!r} is not applied by the {self.name} runtime (it applies "
                                f"{', '.join(sorted(caps.dynamics)) or 'none'}); use runtime sim (every part), docker (all "
                                "but a trace's ms_per_sample) or local (availability, recovery, a trace's online "
                                "column), or remove it "
                                "(docs/churn.md says which runtime applies what)")
        problems += cuda_problems(self.scenario.device, self.name, caps.cuda)
        if caps.max_agents is not None and self.scenario.workers.n > caps.max_agents:
            problems.append(f"workers.n={self.scenario.workers.n} exceeds the {self.name} runtime's "
                            f"limit of {caps.max_agents}")
        return problems

    def applied(self) -> dict:
        """For the manifest: level at which each link property / speed mechanism was applied."""
        c = self.capabilities
        return {"link_rate": c.link_rate, "link_delay": c.link_delay, "link_jitter": c.link_jitter,
                "link_loss": c.link_loss, "cpu_quota": c.cpu_quota, "freeze": c.freeze}

    def make_clock(self) -> WallClock:
        """The run's clock (``self.clock``): host time; the virtual clock's runtime returns its own."""
        return WallClock()

    def transport(self, ps, bind: str, curve_keys: Optional[Path] = None):
        """Start carrying device messages to ``ps``: by default the PS's ZeroMQ serve loop on ``bind``
        (CURVE keys for the devices written to ``curve_keys``). Returns an object with ``endpoint``,
        ``alive``, ``error`` and ``stop()``."""
        return SocketTransport(ps, bind, curve_keys, self.scenario.workers.n)

    def drive(self, ps, seconds: float) -> None:
        """Called by the engine's run loop every tick (and while agents drain after the stop): make
        progress for about ``seconds``."""
        time.sleep(seconds)

    def fidelity(self) -> dict:
        """Called by the engine after cleanup, for summary.json's ``fidelity`` section: what this runtime
        measured of the emulation itself — ``uplink_peak_bps`` (device → peak uplink bps from kernel
        counters) and ``host_cpu`` (busy share of the host CPUs). Empty where it measured nothing."""
        return {}

    def make_evaluator(self, scenario_dict: dict):
        from ...ps.evaluator import ProcessEvaluator
        return ProcessEvaluator(scenario_dict)

    def ps_bind(self) -> str:
        """ZeroMQ endpoint the PS binds (port 0 → the OS picks)."""
        return "tcp://127.0.0.1:0"

    def agent_endpoint(self, bound: str) -> str:
        """Endpoint agents connect to, given the one the PS actually bound."""
        return bound

    @abstractmethod
    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        """Start one agent per spec and return their handles (same order)."""

    def cleanup(self) -> None:
        """Remove everything this runtime created for the run (idempotent)."""

