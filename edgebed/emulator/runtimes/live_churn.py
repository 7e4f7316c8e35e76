"""Availability churn and crash recovery applied live on a real-time runtime (docker, local): the
schedule of each device's offline/online changes — from its class's draws on the virtual clock's stream,
or a trace's ``online`` column — and the crash recoveries, applied from the runtime's drive.

The runtime does the changes (``go_offline``, ``start_again``, ``recover_device``: a container killed and
started again on docker, an agent process killed and forked again on local); this module says when.
Times are emulated seconds since the agents started (× ``timing.dilation`` on the wall clock); each change
is a row of the events table — ``offline``/``online``/``recover`` with ``scheduled_s=``, ``applied_s=`` and
``took_s=``. Draws: device d's alternating online/offline periods come from the stream (seed, d, 0xC1),
recovery delays from (seed, d, 0xC2), the virtual clock's (sim_dynamics.py), so the same scenario and seed
give every runtime the same schedule.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import numpy as np

from .sim_dynamics import diurnal_factor, draw


def due_in(todo: list, clock) -> Optional[float]:
    """Wall seconds until the first of ``todo`` (``(emulated s, …)`` in time order) is due: None when
    none is left or the agents aren't started (the run's ``clock`` has no start yet)."""
    if not todo or clock.t_running is None:
        return None
    return max(0.0, todo[0][0] * (clock.dilation or 1.0) - clock.elapsed())


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


def churn_problems(scenario, trace_problems: Callable[[dict], list[str]]) -> list[str]:
    """What a real runtime refuses of a scenario's availability, recovery and trace (empty: none of
    them, or all fine): churn restarts devices, so the rule must be a gradient rule (a round-based
    one would wait for devices that are away); a trace must read, and ``trace_problems(trace)`` says
    which of its columns this runtime can't apply."""
    dyn = scenario.dynamics
    if not {"availability", "recovery", "trace"} & set(dyn.parts()):
        return []
    out = []
    from ...algorithms import ALGORITHMS
    if ALGORITHMS[scenario.algorithm.name].policy != "gradient":
        out.append(f"dynamics.availability / recover_after / trace with algorithm {scenario.algorithm.name}: "
                   "churn needs a gradient rule (asgd, comp-asgd, adacomp); a round-based rule would wait "
                   "for devices that are away")
    if dyn.trace is not None:
        from ...traces import TraceError, read_trace
        try:
            trace = read_trace(dyn.trace.path, scenario.workers.n)
        except TraceError as err:
            return out + [f"dynamics.trace.path: {err}"]
        out += trace_problems(trace)
    return out


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
        return None if self.ended else due_in(self.todo, self.rt.clock)

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
                wasted = getattr(self.rt, "last_wasted", None) if not online else None   # docker: unacked bytes
                record(d, "online" if online else "offline",
                       f"scheduled_s={t:g} applied_s={clock.elapsed() / dilation:.4f} "
                       f"took_s={time.monotonic() - t0:.3f}" + (f" wasted_bytes={wasted}" if wasted is not None else ""))


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
        with self._lock:
            return due_in(self.todo, self.rt.clock)

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
                away = "; offline" if getattr(self.rt.handle_of(d), "offline", False) else ""   # the sim's words
                record(d, "recover", f"after a fail-stop crash{away} scheduled_s={t:.4f} "
                       f"applied_s={self._now():.4f} took_s={time.monotonic() - t0:.3f}")
