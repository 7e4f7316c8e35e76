"""Availability churn on the docker runtime: devices that go offline and come back, live, from the
scenario's ``dynamics.availability.classes`` (the same draws as the virtual clock's) or a trace's
``online`` column.

A device going **offline** is its container killed (SIGKILL) and left stopped: the agent's work in
progress, the messages on its link and its socket are lost with it, as when a phone's training job is
ended, and its PS session ends (``ParameterServer.leave``), so it is not taken for a silent device.
Coming back **online** is the container started again: it gets a new network namespace and veth, its
links are shaped again (``DockerRuntime.start_again``: the qdiscs, its CPU quota stays) before its agent
passes the gate; the agent then says hello afresh and pulls Θ — the virtual clock's semantics, plus the
agent's start-up (interpreter, torch, data), measured as the time from ``online`` to its ``hello``.

Times are emulated seconds since the agents started (× ``timing.dilation`` on the wall clock); each
change is a row of the events table, ``offline``/``online`` with ``scheduled_s=`` and ``applied_s=``.
Draws: device d's alternating online/offline periods come from the stream (seed, d, 0xC1), the virtual
clock's, so the same scenario and seed give both runtimes the same schedule (``schedule``).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import numpy as np

from ..sim_dynamics import diurnal_factor, draw


def churn_changes(churn, seed: int, device: int, horizon_s: float) -> list[tuple[float, bool]]:
    """(emulated time, online?) changes of one churning device up to ``horizon_s``, starting online —
    the sequence ``SimDynamics`` draws from the same stream (seed, device, 0xC1)."""
    rng = np.random.default_rng([seed, device, 0xC1])
    t, out = draw(churn.online, rng), []
    while t < horizon_s:
        out.append((t, False))
        t += draw(churn.offline, rng, diurnal_factor(churn.diurnal, t))
        if t >= horizon_s:
            break
        out.append((t, True))
        t += draw(churn.online, rng)
    return out


def trace_changes(points) -> list[tuple[float, bool]]:
    """(time, online?) changes of a trace device after t = 0 (its ``online`` rows)."""
    return [(p.time_s, bool(p.online)) for p in points if p.time_s > 0 and p.online is not None]


def schedule(scenario, trace: Optional[dict], horizon_s: float) -> tuple[dict, set]:
    """→ ({device: [(t, online?), ...]}, devices away at t = 0) for the whole run: a trace device follows
    its trace, any other device of a churning class its draws."""
    trace = trace or {}
    classes = scenario.dynamics.availability.classes
    out, away = {}, set()
    for d in range(scenario.workers.n):
        if d in trace and any(p.online is not None for p in trace[d]):
            first = [p for p in trace[d] if p.time_s <= 0 and p.online is not None]
            if first and first[-1].online is False:
                away.add(d)
            out[d] = trace_changes(trace[d])
        elif (churn := classes.get(scenario.class_of(d).name)) is not None:
            out[d] = churn_changes(churn, scenario.seed, d, horizon_s)
    return out, away


class LiveChurn:
    """Applies the schedule from the runtime's drive (``tick``), as ``LiveLinkEvents`` does the link
    events. ``runtime``: a DockerRuntime (``go_offline``, ``start_again``, ``clock``, ``handles``)."""

    def __init__(self, runtime, trace: Optional[dict], horizon_s: float):
        self.rt = runtime
        per_device, self.away_at_start = schedule(runtime.scenario, trace, horizon_s)
        self.todo = sorted((t, d, on) for d, changes in per_device.items() for t, on in changes)
        self.away: set[int] = set()
        self.ended = False

    def seconds_to_next(self) -> Optional[float]:
        clock = self.rt.clock
        if not self.todo or clock.t_running is None or self.ended:
            return None
        return max(0.0, self.todo[0][0] * (clock.dilation or 1.0) - clock.elapsed())

    def tick(self, ps, record: Callable[[int, str, str], None]) -> None:
        """Apply every change now due. Once the run stops nothing changes, and devices away are let go
        (their handles report their stopped containers, so the teardown does not wait for them)."""
        clock = self.rt.clock
        if ps.stopped is not None:
            if not self.ended:
                self.ended = True
                for d in self.away:
                    self.rt.handle_of(d).away = False
            return
        if clock.t_running is None:
            return
        dilation = clock.dilation or 1.0
        while self.todo and clock.elapsed() / dilation >= self.todo[0][0]:
            t, d, online = self.todo.pop(0)
            if online == (d not in self.away):
                continue   # already so (a trace repeating itself)
            t0 = time.monotonic()
            if online:
                ok = self.rt.start_again(d)
                if ok:
                    self.away.discard(d)
            else:
                ok = self.rt.go_offline(d, ps)
                if ok:
                    self.away.add(d)
            if ok:
                record(d, "online" if online else "offline",
                       f"scheduled_s={t:g} applied_s={clock.elapsed() / dilation:.4f} "
                       f"took_s={time.monotonic() - t0:.3f}")


class LiveRecovery:
    """Crash recovery (``dynamics.availability.recover_after``) on the docker runtime: a device frozen by
    a fail-stop crash (``docker pause``) is, after its drawn delay, killed, started again and re-shaped
    (``ContainerChurn.recover_device``); its agent says hello afresh and pulls Θ. Delays come from the
    stream (seed, device, 0xC2), the virtual clock's. ``crashed`` is called on the PS thread (the
    handle's freeze), ``tick`` from the runtime's drive."""

    def __init__(self, runtime):
        self.rt = runtime
        self.spec = runtime.scenario.dynamics.availability.recover_after
        self._rng: dict[int, np.random.Generator] = {}
        self.todo: list[tuple[float, int]] = []       # (emulated time due, device), sorted
        self._lock = threading.Lock()

    def _now(self) -> float:
        clock = self.rt.clock
        return clock.elapsed() / (clock.dilation or 1.0)

    def crashed(self, device: int) -> None:
        rng = self._rng.setdefault(device, np.random.default_rng([self.rt.scenario.seed, device, 0xC2]))
        with self._lock:
            self.todo.append((self._now() + draw(self.spec, rng), device))
            self.todo.sort()

    def seconds_to_next(self) -> Optional[float]:
        clock = self.rt.clock
        with self._lock:
            if not self.todo or clock.t_running is None:
                return None
            return max(0.0, self.todo[0][0] * (clock.dilation or 1.0) - clock.elapsed())

    def tick(self, ps, record: Callable[[int, str, str], None]) -> None:
        if ps.stopped is not None or self.rt.clock.t_running is None:
            return
        while True:
            with self._lock:
                if not self.todo or self._now() < self.todo[0][0]:
                    return
                t, d = self.todo.pop(0)
            t0 = time.monotonic()
            if self.rt.recover_device(d, ps):
                record(d, "recover", f"after a fail-stop crash scheduled_s={t:.4f} applied_s={self._now():.4f} "
                       f"took_s={time.monotonic() - t0:.3f}")


class ContainerChurn:
    """DockerRuntime's part of availability churn (mixin): what the scenario may ask, and a device's
    container going offline and coming back. Uses the runtime's ``handles``, ``record``, ``gate_dir``,
    ``_specs``, counters and ``_reshaped`` (restart_device's second half)."""

    def _churn_problems(self) -> list[str]:
        """Availability and crash recovery on docker: containers stopped and started (docker/churn.py),
        so the agent must live in its container and the rule must be a gradient rule (a round-based one
        would wait for devices that are away); a trace's columns as docker/tracelive.py can apply them."""
        dyn, out = self.scenario.dynamics, []
        parts = set(dyn.parts())
        if not {"availability", "recovery", "trace"} & parts:
            return out
        if self.spec.agents != "container":
            out.append("dynamics.availability / recover_after / trace on docker stop and start the devices' "
                       "containers: set runtime.docker.agents: container (forked agents are not restarted)")
        from ....algorithms import ALGORITHMS
        if ALGORITHMS[self.scenario.algorithm.name].policy != "gradient":
            out.append(f"dynamics.availability / recover_after / trace with algorithm {self.scenario.algorithm.name}: "
                       "churn needs a gradient rule (asgd, comp-asgd, adacomp); a round-based rule would wait "
                       "for devices that are away")
        if dyn.trace is not None:
            from ....traces import TraceError, read_trace
            from .tracelive import problems
            try:
                trace = read_trace(dyn.trace.path, self.scenario.workers.n)
            except TraceError as err:
                return out + [f"dynamics.trace.path: {err}"]
            out += problems(self.scenario, trace)
        return out

    def go_offline(self, device: int, ps) -> bool:
        """Availability churn: device ``device`` leaves — its container is killed (SIGKILL: its work in
        progress and its socket are lost) and stays stopped; its PS session ends. → done (False: the
        device had ended or crashed)."""
        h = self.handle_of(device)
        if h is None or h.returncode is not None or h.frozen or h.away:
            return False
        self.sample_counters(force=True)      # its veth goes with its namespace: keep what it counted
        self._counter_base[device] = dict(self._counters.get(device, {}))
        h.away = True
        try:
            h.container.kill()
        except Exception as err:  # noqa: BLE001 — it ended meanwhile: away all the same
            self.record["warnings"].append(f"device {device}: going offline: {err}")
        ps.leave(device)
        entry = self.record["containers"][str(device)]
        entry["offline"] = entry.get("offline", 0) + 1
        return True

    def on_frozen(self, device: int) -> None:
        """The device's container was paused (a fail-stop crash): its recovery is scheduled, if any."""
        if self.recovery is not None:
            self.recovery.crashed(device)

    def recover_device(self, device: int, ps) -> bool:
        """Crash recovery: the paused container is killed (its work in progress and socket lost), started
        again and its links shaped again (qdiscs on the new veth; its CPU quota, a container setting,
        stays); the PS lets it say hello afresh. → done (False: the device had ended)."""
        h = self.handle_of(device)
        if h is None or not h.frozen or h.returncode is not None:
            return False
        self.sample_counters(force=True)      # its veth goes with its namespace: keep what it counted
        self._counter_base[device] = dict(self._counters.get(device, {}))
        gate = self.gate_dir / str(device)
        gate.unlink(missing_ok=True)          # the new agent waits until its links are shaped again
        h.away = True                         # stopped, yet not ended (poll() must not report an exit)
        try:
            h.container.kill()                # docker delivers SIGKILL to a paused container and thaws it
        except Exception as err:  # noqa: BLE001 — it ended meanwhile
            self.record["warnings"].append(f"device {device}: recovering: {err}")
        h.container.wait(timeout=30)
        h.frozen = False
        ps.recover(device)
        h.container.start()
        self._reshaped(self._specs[device], h, gate)
        entry = self.record["containers"][str(device)]
        entry["recovered"] = entry.get("recovered", 0) + 1
        return True

    def start_again(self, device: int) -> bool:
        """Availability churn: device ``device`` returns — its stopped container is started, its links
        shaped again on the new veth before its agent passes the gate (which then says hello afresh)."""
        h = self.handle_of(device)
        if h is None or not h.away:
            return False
        gate = self.gate_dir / str(device)
        gate.unlink(missing_ok=True)
        h.container.wait(timeout=30)    # killed when it went offline: exited by now, or soon
        h.container.start()
        self._reshaped(self._specs[device], h, gate)
        return True
