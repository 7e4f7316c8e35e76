"""A device trace's speed and bandwidth columns on the docker runtime, applied live.

``uplink_kbit_s`` / ``downlink_kbit_s``: the rate of the device's tbf is changed in place (``tc qdisc
change``, docker/live.py's ``change_rate``) — the uplink on the container's eth0, the downlink on its
host-side veth (``runtime.docker.shape_downlink``). ``slowdown``: the container's CPU quota becomes
``base_cpus / slowdown`` (or ``cpus.<class>`` × class slowdown / slowdown) — how docker gives a speed
class its speed. ``ms_per_sample`` (an absolute compute speed) and ``slowdown`` under ``timing.pacing``
are refused at validate (``problems``).

Rows at t ≤ 0 set the device's start values (its first shaping and quota); later rows are applied at
their time (emulated seconds since the agents started, × ``timing.dilation`` on the wall clock) and
recorded as ``trace`` rows of the events table with ``scheduled_s=``, ``applied_s=`` (when the new
rates were in force; the quota, a docker API call, follows within ``took_s=``). The values in
force are kept (``now``), so a container started again (churn, crash recovery) is shaped with them.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

from . import links
from ..live_churn import due_in
from .live import change_rate

COLUMNS = ("slowdown", "uplink_kbit_s", "downlink_kbit_s")


def problems(scenario, trace: dict) -> list[str]:
    """What of a trace the docker runtime can't apply, as messages naming the key."""
    out = []
    if any(p.ms_per_sample is not None for pts in trace.values() for p in pts):
        out.append("dynamics.trace.path: the docker runtime can't apply ms_per_sample (an absolute compute "
                   "speed; docker sets a CPU quota relative to base_cpus): give a slowdown column instead, "
                   "or use runtime sim")
    if scenario.timing.pacing and any(p.slowdown is not None for pts in trace.values() for p in pts):
        out.append("dynamics.trace.path: a slowdown column on docker sets the CPU quota, which timing.pacing "
                   "replaces (paced agents run at base_cpus): set timing.pacing: false or drop the column")
    return out


class LiveTrace:
    """The speed and bandwidth rows of a trace, applied from the runtime's drive (``tick``).
    ``runtime``: a DockerRuntime (``scenario``, ``clock``, ``record``, ``spec``, ``set_speed``)."""

    def __init__(self, runtime, trace: dict):
        self.rt = runtime
        self.now: dict[int, dict] = {}     # device → {column: value in force}
        self.todo = []
        for d, points in trace.items():
            for p in points:
                values = {c: getattr(p, c) for c in COLUMNS if getattr(p, c) is not None}
                if not values:
                    continue
                if p.time_s <= 0:
                    self.now.setdefault(d, {}).update(values)
                else:
                    self.todo.append((p.time_s, d, values))
        self.todo.sort(key=lambda x: (x[0], x[1]))

    def profile(self, device: int, direction: str, klass):
        """The link profile device ``device`` has now in ``direction``: its class's, with the trace's
        rate (emulated kbit/s → real bit/s under the run's dilation) where the trace set one."""
        base = getattr(klass, direction)
        kbit = self.now.get(device, {}).get(f"{direction}_kbit_s")
        if kbit is None:
            return base
        return base.model_copy(update={"rate": kbit * 1000.0 / (self.rt.clock.dilation or 1.0)})

    def slowdown(self, device: int) -> Optional[float]:
        return self.now.get(device, {}).get("slowdown")

    def seconds_to_next(self) -> Optional[float]:
        return due_in(self.todo, self.rt.clock)

    def tick(self, ps, record: Callable[[int, str, str], None]) -> None:
        clock = self.rt.clock
        if clock.t_running is None or ps.stopped is not None:
            return
        dilation = clock.dilation or 1.0
        while self.todo and clock.elapsed() / dilation >= self.todo[0][0]:
            t, d, values = self.todo.pop(0)
            self.now.setdefault(d, {}).update(values)
            t0 = time.monotonic()
            shaped = self._shape(d, values)
            applied = clock.elapsed() / dilation    # the link's new rate is in force from here
            if "slowdown" in values:                 # then the quota (a docker API call: slower)
                self.rt.set_speed(d, values["slowdown"])
                if shaped is None:
                    applied = clock.elapsed() / dilation
            record(d, "trace", f"scheduled_s={t:g} applied_s={applied:.4f} took_s={time.monotonic() - t0:.3f} "
                   + " ".join(f"{k}={v:g}" for k, v in values.items())
                   + (" (away: at its return)" if shaped is False else ""))

    def _shape(self, d: int, values: dict) -> Optional[bool]:
        """The new rates on the device's link now. → True: changed; False: its container is away or
        ended (a restart shapes it with ``now``); None: no rate in these values."""
        if "uplink_kbit_s" not in values and "downlink_kbit_s" not in values:
            return None
        rt = self.rt
        rec = rt.record["containers"].get(str(d))
        h = rt.handle_of(d)
        if not rec or "eth0" not in rec or h is None or h.away or h.returncode is not None:
            return False
        klass = rt.scenario.class_of(d)
        try:
            if "uplink_kbit_s" in values:
                prof = self.profile(d, "uplink", klass)
                change_rate(rec["eth0"], prof, netns=rec["pid"], base_rate=max(prof.rate, klass.uplink.rate or 0))
                rec["uplink_rate_bps"] = prof.rate
            if "downlink_kbit_s" in values and rt.spec.shape_downlink and "host_veth" in rec:
                prof = self.profile(d, "downlink", klass)
                change_rate(rec["host_veth"], prof, base_rate=max(prof.rate, klass.downlink.rate or 0))
                rec["downlink_rate_bps"] = prof.rate
        except links.LinkError:
            return False
        return True


class TracedDevices:
    """DockerRuntime's part (mixin): a device's link profile and CPU quota with a trace's values in
    force. Uses the runtime's ``scenario``, ``trace`` (a LiveTrace or None), ``cpus_of``,
    ``_quota_pending``, ``handle_of``, ``_set_quota`` and ``record``."""

    def link_profile(self, device: int, direction: str):
        """Device ``device``'s link profile now in ``direction`` (uplink, downlink): its speed class's,
        with a trace's rate where one is in force (docker/tracelive.py)."""
        klass = self.scenario.class_of(device)
        return self.trace.profile(device, direction, klass) if self.trace is not None else getattr(klass, direction)

    def cpus_now(self, device: int) -> float:
        """Device ``device``'s CPU quota now: its class's, scaled by a trace's slowdown in force."""
        klass = self.scenario.class_of(device)
        cpus = self.cpus_of(klass.name)
        slowdown = self.trace.slowdown(device) if self.trace is not None else None
        return cpus if slowdown is None else cpus * klass.slowdown / slowdown

    def set_speed(self, device: int, slowdown: float) -> None:
        """A trace's new slowdown: the CPU quota follows (at the first push if not applied yet)."""
        cpus = self.cpus_now(device)
        if device in self._quota_pending:
            self._quota_pending[device] = cpus
            return
        h = self.handle_of(device)
        if h is None or h.returncode is not None:
            return
        try:
            self._set_quota(h, device, cpus)
        except Exception as err:  # noqa: BLE001 — an engine error on one device is a warning
            self.record["warnings"].append(f"device {device}: CPU quota (trace slowdown {slowdown:g}) not applied: {err}")
