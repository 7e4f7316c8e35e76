"""Local runtime: one OS process per device agent on loopback (the default; runs anywhere).

Links are emulated in the agent's send path (``device_agent/link.py``): rate, delay, jitter and loss
at application level. Speed classes sleep in the agent. Fail-stop = SIGSTOP from here.

Availability churn and crash recovery (``dynamics.availability``, a trace's ``online`` column; when: the
shared ``live_churn.py``): a device going offline is its agent process killed (SIGKILL: its work in
progress, its messages and its socket are lost) and its PS session ended; coming back — or recovering
after a crash, the stopped process killed first — is a new agent process for the device, which says
hello afresh and pulls Θ.

Agents are forked from a fork server that has already imported torch and the agent code
(``start_method: forkserver``, the default): start-up costs a fork instead of a 1–2 s interpreter +
torch import per agent, and pages of torch are shared copy-on-write. ``start_method: exec`` starts
each agent as a fresh ``python -m edgebed.device_agent`` instead.
"""
from __future__ import annotations

import dataclasses
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
from .live_churn import churn_problems

class LocalSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start_method: Literal["forkserver", "exec"] = "forkserver"


class ProcessHandle(AgentHandle):
    """Popen-like handle over either a subprocess.Popen or a multiprocessing.Process."""

    def __init__(self, device: int, proc, on_frozen=None):
        self.device = device
        self.proc = proc
        self.away = False           # its process killed on purpose (offline, recovering): not an exit
        self.offline = False        # away by the churn schedule (availability), crashed or not
        self.frozen = False
        self.on_frozen = on_frozen  # the runtime's crash recovery, if any
        self.restarts = 0           # new agents started for it (churn, recovery): its hello's attempt

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> Optional[int]:
        if self.away:
            return None
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
        self.frozen = True
        if self.on_frozen is not None:
            self.on_frozen(self.device)


def _online_only(trace: dict) -> list[str]:
    """The local runtime applies a trace's ``online`` column only."""
    cols = ("slowdown", "ms_per_sample", "uplink_kbit_s", "downlink_kbit_s")
    used = sorted({c for pts in trace.values() for p in pts for c in cols if getattr(p, c) is not None})
    return [f"dynamics.trace.path: the local runtime applies a trace's online column only (its agents' "
            f"links and speed are set once, at hello), and this trace sets {', '.join(used)}: drop those "
            "columns, or use runtime docker or sim"] if used else []


class LocalRuntime(Runtime):
    name = "local"
    Spec = LocalSpec
    capabilities = Capabilities(link_rate="app", link_delay="app", link_jitter="app", link_loss="app",
                                cpu_quota=False, freeze="signal", curve=True, cuda=True,
                                dynamics=frozenset({"availability", "recovery", "trace"}))

    def __init__(self, scenario, run_dir):
        super().__init__(scenario, run_dir)
        self.handles: list[ProcessHandle] = []
        self.log_dir = self.run_dir / "logs"
        self.startup_seconds: Optional[float] = None
        self._specs: dict[int, AgentSpec] = {}
        self.timed: list = []      # live_churn.LiveChurn / LiveRecovery, made in start()
        self.recovery = None

    def check(self) -> list[str]:
        """Churn and recovery restart agent processes: a gradient rule only, and of a trace only its
        ``online`` column (links and speed are the agent's, set once from its Welcome)."""
        return super().check() + churn_problems(self.scenario, _online_only)

    def start(self, specs: list[AgentSpec]) -> list[AgentHandle]:
        self.log_dir.mkdir(exist_ok=True)
        self._specs = {s.device: s for s in specs}
        self._start_dynamics()
        t0 = time.monotonic()
        on_frozen = self.recovery.crashed if self.recovery is not None else None
        for spec in specs:
            # Ctrl-C/SIGTERM wait until the child is in handles and pids.json: never an agent that
            # runs but that neither cleanup() nor `edgebed clean` knows of.
            with procs.signals_deferred():
                self.handles.append(ProcessHandle(spec.device, self._spawn(spec), on_frozen))
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
        live = [h for h in self.handles if not h.away]
        write_json_atomic(self.run_dir / "pids.json", {"pids": [h.pid for h in live],
                                                       "procs": [procs.identity(h.pid) for h in live]})

    # -- availability churn and crash recovery (when: live_churn.py) -------------------------------
    def _start_dynamics(self) -> None:
        dyn = self.scenario.dynamics
        parts = set(dyn.parts())
        from .live_churn import LiveChurn, LiveRecovery
        if "recovery" in parts:
            self.recovery = LiveRecovery(self)
            self.timed.append(self.recovery)
        if {"availability", "trace"} & parts:
            from ...traces import read_trace
            trace = read_trace(dyn.trace.path, self.scenario.workers.n) if dyn.trace is not None else None
            horizon = (self.scenario.stop.wall_time or 86400.0) / (self.clock.dilation or 1.0)
            self.timed.append(LiveChurn(self, trace, horizon))

    def handle_of(self, device: int) -> Optional[ProcessHandle]:
        return next((h for h in self.handles if h.device == device), None)

    def drive(self, ps, seconds: float) -> None:
        """Engine tick: churn and recoveries now due, else sleep until the next one or ``seconds``."""
        if not self.timed:
            time.sleep(seconds)
            return
        end = time.monotonic() + seconds
        for t in self.timed:
            t.tick(ps, ps.event)
            if (wait := t.seconds_to_next()) is not None:
                end = min(end, time.monotonic() + wait)
        if (left := end - time.monotonic()) > 0:
            time.sleep(left)
        for t in self.timed:
            t.tick(ps, ps.event)

    def _end_process(self, h: ProcessHandle) -> None:
        h.away = True                      # killed on purpose: not an exit the engine should see
        try:
            os.kill(h.pid, signal.SIGKILL)   # a SIGSTOPped (crashed) process too
        except ProcessLookupError:
            pass
        h.wait(5)

    def go_offline(self, device: int, ps) -> bool:
        """The device leaves: its agent is killed (its work in progress and socket lost), its session ends.
        A crashed device leaves too, as on the virtual clock: its stopped agent stays stopped (its
        recovery ends it), and a recovery due while it is away starts nothing."""
        h = self.handle_of(device)
        if h is None or h.offline or h.poll() is not None:
            return False
        if not h.frozen:
            self._end_process(h)
        h.offline = True
        ps.leave(device)
        return True

    def start_again(self, device: int) -> bool:
        """The device returns: a new agent process, which says hello afresh and pulls Θ. A device that
        crashed and has not recovered yet comes back crashed: its recovery starts the new agent."""
        h = self.handle_of(device)
        if h is None or not h.offline:
            return False
        h.offline = False
        if not h.frozen:
            self._spawn_again(h)
        return True

    def recover_device(self, device: int, ps) -> bool:
        """Crash recovery: the stopped agent is killed; the PS lets the device say hello again; a new agent
        starts now, or when the device comes back if the churn schedule has it away."""
        h = self.handle_of(device)
        if h is None or not h.frozen or h.poll() is not None:
            return False
        self._end_process(h)
        h.frozen = False
        ps.recover(device)
        if not h.offline:
            self._spawn_again(h)
        return True

    def _spawn_again(self, h: ProcessHandle) -> None:
        """A new agent for a device that came back or recovered; its hello counts the restart in its
        attempt (``AgentSpec.attempt``)."""
        spec = self._specs[h.device]
        h.restarts += 1
        env = {**spec.env, "EDGEBED_ATTEMPT": str(spec.attempt(h.restarts))}
        with procs.signals_deferred():
            h.proc = self._spawn(dataclasses.replace(spec, env=env))
            h.away = False
            self._record()

    def cleanup(self) -> None:
        for h in self.handles:
            if h.poll() is None:
                h.kill()
