"""Local runtime: one OS process per device agent on loopback (the default; runs anywhere).

Links are emulated in the agent's send path (``device_agent/link.py``): rate, delay, jitter and loss
at application level. Speed classes sleep in the agent. Fail-stop = SIGSTOP from here.

Agents are forked from a fork server that has already imported torch and the agent code
(``start_method: forkserver``, the default): start-up costs a fork instead of a 1–2 s interpreter +
torch import per agent, and pages of torch are shared copy-on-write. ``start_method: exec`` starts
each agent as a fresh ``python -m edgebed.device_agent`` instead.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict

from ... import procs
from ...rundir import write_json_atomic
from .base import AgentHandle, AgentSpec, Capabilities, Runtime
from .forkserver import AGENT_ENV, ensure_server, fork_agent

class LocalSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start_method: Literal["forkserver", "exec"] = "forkserver"


class ProcessHandle(AgentHandle):
    """Popen-like handle over either a subprocess.Popen or a multiprocessing.Process."""

    def __init__(self, device: int, proc):
        self.device = device
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> Optional[int]:
        if isinstance(self.proc, subprocess.Popen):
            return self.proc.poll()
        return self.proc.exitcode

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        if isinstance(self.proc, subprocess.Popen):
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        self.proc.join(timeout)
        return self.proc.exitcode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)   # works on a SIGSTOPped process too
        self.wait(5)

    def freeze(self) -> None:
        self.send_signal(signal.SIGSTOP)


class LocalRuntime(Runtime):
    name = "local"
    Spec = LocalSpec
    capabilities = Capabilities(link_rate="app", link_delay="app", link_jitter="app", link_loss="app",
                                cpu_quota=False, freeze="signal", curve=True, cuda=True)

    def __init__(self, scenario, run_dir):
        super().__init__(scenario, run_dir)
        self.handles: list[ProcessHandle] = []
        self.log_dir = self.run_dir / "logs"
        self.startup_seconds: Optional[float] = None

    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        self.log_dir.mkdir(exist_ok=True)
        t0 = time.monotonic()
        for spec in specs:
            # Ctrl-C/SIGTERM wait until the child is in handles and pids.json: never an agent that
            # runs but that neither cleanup() nor `edgebed clean` knows of.
            with procs.signals_deferred():
                self.handles.append(ProcessHandle(spec.device, self._spawn(spec)))
                self._record()
        self.startup_seconds = time.monotonic() - t0
        return list(self.handles)

    def make_evaluator(self, scenario_dict: dict):
        """Forked from the agents' fork server where they start there (a fork instead of a fresh
        interpreter importing torch: ~1.9 s of CPU a run on this project's CI host)."""
        if self.spec.start_method != "forkserver":
            return super().make_evaluator(scenario_dict)
        from ... import numerics
        from ...ps.evaluator import ProcessEvaluator
        ensure_server()
        return ProcessEvaluator(scenario_dict, fork_env={**AGENT_ENV, **numerics.environment(self.scenario.numerics)})

    def _spawn(self, spec: AgentSpec):
        log_path = self.log_dir / f"agent-{spec.device:04d}.log"
        if self.spec.start_method == "forkserver":
            return fork_agent(spec, str(log_path), {})
        with open(log_path, "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "edgebed.device_agent", "--ps", spec.ps_address,
                 "--device", str(spec.device)],
                env={**os.environ, **AGENT_ENV, **spec.environment()},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=procs.die_with_parent)

    def _record(self) -> None:
        """pids.json: PID and start time of every agent, so `edgebed clean` ends exactly these processes."""
        write_json_atomic(self.run_dir / "pids.json", {"pids": [h.pid for h in self.handles],
                                                       "procs": [procs.identity(h.pid) for h in self.handles]})

    def cleanup(self) -> None:
        for h in self.handles:
            if h.poll() is None:
                h.kill()
