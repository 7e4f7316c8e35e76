"""Local runtime: one OS process per device agent on loopback (the default; runs anywhere).

Links are emulated in the agent's send path (``device_agent/link.py``): rate, delay, jitter and loss
at application level. Speed classes sleep in the agent. Fail-stop = SIGSTOP from here.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Optional

from ...rundir import write_json_atomic
from .base import AgentHandle, AgentSpec, Capabilities, Runtime


class ProcessHandle(AgentHandle):
    def __init__(self, device: int, proc: subprocess.Popen):
        self.device = device
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)   # works on a SIGSTOPped process too
        self.wait(5)

    def freeze(self) -> None:
        self.send_signal(signal.SIGSTOP)


class LocalRuntime(Runtime):
    name = "local"
    capabilities = Capabilities(link_rate="app", link_delay="app", link_jitter="app", link_loss="app",
                                cpu_quota=False, freeze="signal")

    def __init__(self, scenario, run_dir):
        super().__init__(scenario, run_dir)
        self.handles: list[ProcessHandle] = []
        self.log_dir = self.run_dir / "logs"

    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        self.log_dir.mkdir(exist_ok=True)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        for spec in specs:
            log = open(self.log_dir / f"agent-{spec.device:04d}.log", "wb")
            proc = subprocess.Popen(
                [sys.executable, "-m", "edgebed.device_agent", "--ps", spec.ps_address,
                 "--device", str(spec.device)],
                env={**env, **spec.env, "EDGEBED_CLASS": spec.speed_class},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            self.handles.append(ProcessHandle(spec.device, proc))
        # Recorded so `edgebed clean` can end exactly these processes after a crash of the engine.
        write_json_atomic(self.run_dir / "pids.json", {"pids": [h.pid for h in self.handles]})
        return list(self.handles)

    def cleanup(self) -> None:
        for h in self.handles:
            if h.poll() is None:
                h.kill()
