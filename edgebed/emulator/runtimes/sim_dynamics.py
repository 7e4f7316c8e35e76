"""The virtual clock's dynamics: availability churn, crash recovery, a device trace, timed network events
and the PS's shared FIFO link, as events on ``SimRuntime``'s heap (``dynamics:`` in the scenario).

Every change is recorded in the ``events`` table at the virtual time it took effect: ``offline`` (detail:
``wasted_bytes=`` the uplink bytes of messages the device had in flight, lost with it), ``online``,
``recover``, ``trace``, ``net-link``/``net-link-end``, ``partition``/``partition-end``, ``ps-link-set``/
``ps-link-end`` (detail: ``scheduled_s=`` the time the scenario asked for), and ``ps-link`` samples
(``direction= utilisation= queue_mean_s= queue_max_s= messages= bytes=`` per ``ps_link.sample`` window).
Random streams: churn draws of device d come from (seed, d, 0xC1), recovery delays (seed, d, 0xC2):
the same scenario and seed give the same run.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ...dynamics import DurationDist

_OFF, _ON, _RECOVER, _TRACE, _NET, _NET_END, _SAMPLE = range(7)


def draw(dist: DurationDist, rng: np.random.Generator, scale: float = 1.0) -> float:
    """One duration in seconds from ``dist`` (its mean scaled by ``scale``)."""
    mean = dist.mean * scale
    if dist.dist == "constant":
        return mean
    if dist.dist == "exponential":
        return float(rng.exponential(mean))
    if dist.dist == "uniform":
        s = dist.spread * scale
        return float(rng.uniform(mean - s, mean + s))
    mu = math.log(mean) - dist.sigma ** 2 / 2   # lognormal with this mean
    return float(rng.lognormal(mu, dist.sigma))


def diurnal_factor(diurnal, t: float) -> float:
    """The offline-duration multiplier at virtual time ``t`` (1 without a diurnal pattern)."""
    if diurnal is None:
        return 1.0
    return 1.0 - diurnal.amplitude * math.cos(2 * math.pi * (t - diurnal.peak) / diurnal.period)


class _Fifo:
    """One direction of the PS's shared link: a FIFO queue served at ``rate`` bits/s."""

    def __init__(self, rate: Optional[float]):
        self.rate = rate
        self.free_at = 0.0
        self.busy: list[tuple[float, float]] = []   # service intervals not yet fully counted
        self.delays: list[float] = []
        self.bytes = 0

    def serve(self, t: float, nbytes: int) -> float:
        """A message of ``nbytes`` reaches the queue at ``t``; → when its last bit has left."""
        if not self.rate:
            return t
        start = max(t, self.free_at)
        self.free_at = start + nbytes * 8.0 / self.rate
        self.busy.append((start, self.free_at))
        self.delays.append(start - t)
        self.bytes += nbytes
        return self.free_at

    def window(self, t0: float, t1: float) -> dict:
        """Utilisation and queueing delay over [t0, t1); forgets what ended before t1."""
        busy = sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in self.busy)
        self.busy = [(a, b) for a, b in self.busy if b > t1]
        d, self.delays = self.delays, []
        nbytes, self.bytes = self.bytes, 0
        return {"utilisation": busy / (t1 - t0), "queue_mean_s": sum(d) / len(d) if d else 0.0,
                "queue_max_s": max(d) if d else 0.0, "messages": len(d), "bytes": nbytes}


class SimDynamics:
    """Applies ``scenario.dynamics`` to a ``SimRuntime``'s devices (called from its event loop)."""

    def __init__(self, runtime, scenario, trace: Optional[dict] = None):
        self.rt = runtime
        self.spec = scenario.dynamics
        self.seed = scenario.seed
        self.batch = scenario.algorithm.batch_size
        self.trace = trace or {}
        spec = self.spec
        self.churn = {d: spec.availability.classes.get(dev.klass["name"]) for d, dev in runtime.devices.items()}
        self._rng: dict[tuple[int, int], np.random.Generator] = {}
        self.partitioned: dict[int, float] = {}    # device → virtual time its partition heals
        self.ps_in = _Fifo(spec.ps_link.ingress if spec.ps_link else None)
        self.ps_out = _Fifo(spec.ps_link.egress if spec.ps_link else None)
        self._saved: dict[int, list] = {}          # event index → what to restore at its end
        self._last_sample = 0.0

    # -- set-up ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Trace values at t = 0 apply before the devices say hello; every later change is scheduled."""
        rt = self.rt
        for d, points in self.trace.items():
            for p in points:
                if p.time_s <= 0:
                    self._apply_trace(rt.devices[d], p, initial=True)
                else:
                    rt._schedule(p.time_s, _DYN, d, (_TRACE, p))
        for d, churn in self.churn.items():
            if churn is not None and rt.devices[d].online:
                rt._schedule(draw(churn.online, self.rng(d, 0xC1)), _DYN, d, (_OFF, None))
        for i, e in enumerate(self.spec.events):
            rt._schedule(e.at, _DYN, -1, (_NET, i))
            if e.duration is not None:
                rt._schedule(e.at + e.duration, _DYN, -1, (_NET_END, i))
        if self.spec.ps_link is not None:
            rt._schedule(self.spec.ps_link.sample, _DYN, -1, (_SAMPLE, None))

    def rng(self, d: int, stream: int) -> np.random.Generator:
        key = (d, stream)
        if key not in self._rng:
            self._rng[key] = np.random.default_rng([self.seed, d, stream])
        return self._rng[key]

    def applied(self) -> dict:
        """For the manifest: each part in use, and where it is applied (the virtual clock models it)."""
        return {part: "model" for part in self.spec.parts()}

    # -- the links ---------------------------------------------------------------------------------
    def gate(self, d: int, t: float) -> float:
        """When a transfer that wants to start at ``t`` on device ``d``'s link can start (after a partition)."""
        heal = self.partitioned.get(d)
        return heal if heal is not None and heal > t else t

    # -- events --------------------------------------------------------------------------------------
    def handle(self, d: int, payload) -> None:
        kind, arg = payload
        rt, ps = self.rt, self.rt.ps
        if ps.stopped is not None:      # nothing changes once the run is over (and nothing is rescheduled)
            return
        if kind == _SAMPLE:
            self._sample()
        elif kind in (_NET, _NET_END):
            self._net(arg, kind == _NET_END)
        elif kind == _TRACE:
            self._apply_trace(rt.devices[d], arg)
        elif kind == _RECOVER:
            self._recover(rt.devices[d])
        else:
            dev = rt.devices[d]
            churn = self.churn[d]
            if kind == _OFF:
                self.go_offline(dev)
                off = draw(churn.offline, self.rng(d, 0xC1), diurnal_factor(churn.diurnal, rt.now))
                rt._schedule(rt.now + off, _DYN, d, (_ON, None))
            else:
                self.go_online(dev)
                rt._schedule(rt.now + draw(churn.online, self.rng(d, 0xC1)), _DYN, d, (_OFF, None))

    def go_offline(self, dev, why: str = "") -> None:
        if not dev.online or dev.code is not None:
            return
        dev.online = False
        dev.epoch += 1                  # its timed phases, replies and messages in flight are void
        wasted = sum(dev.in_flight.values())
        dev.in_flight.clear()
        dev.wasted_bytes += wasted
        dev.then = []
        m = dev.machine
        m._early = m._reply = m._request = None   # the work in progress is lost with the device
        self.rt.ps.event(dev.device, "offline", f"wasted_bytes={wasted}{why}")

    def go_online(self, dev, why: str = "") -> None:
        if dev.online or dev.code is not None:
            return
        dev.online = True
        self.rt.ps.event(dev.device, "online", why.strip())
        if not dev.frozen:
            self._rejoin(dev)

    def _rejoin(self, dev) -> None:
        """The device says hello again and pulls afresh (a new session)."""
        dev.epoch += 1
        self.rt._carry_out(dev, dev.machine.hello(dev.machine.attempt + 1))

    def crashed(self, dev) -> None:
        """A fail-stop crash: a recovery is scheduled when the scenario has one."""
        rec = self.spec.availability.recover_after
        if rec is not None:
            self.rt._schedule(self.rt.now + draw(rec, self.rng(dev.device, 0xC2)), _DYN, dev.device,
                              (_RECOVER, None))

    def _recover(self, dev) -> None:
        if not dev.frozen or dev.code is not None:
            return
        self.rt.ps.recover(dev.device)
        dev.frozen = False
        dev.in_flight.clear()
        dev.then = []
        m = dev.machine
        m._early = m._reply = m._request = None
        self.rt.ps.event(dev.device, "recover", "after a fail-stop crash" + ("" if dev.online else "; offline"))
        if dev.online:
            self._rejoin(dev)

    def _apply_trace(self, dev, p, initial: bool = False) -> None:
        changed = []
        if p.slowdown is not None:
            dev.klass["slowdown"], dev.step_s = p.slowdown, None
            changed.append(f"slowdown={p.slowdown:g}")
        if p.ms_per_sample is not None:
            dev.step_s = p.ms_per_sample * self.batch / 1000.0
            changed.append(f"ms_per_sample={p.ms_per_sample:g}")
        if p.uplink_kbit_s is not None:
            dev.up.rate = p.uplink_kbit_s * 1000.0
            changed.append(f"uplink_kbit_s={p.uplink_kbit_s:g}")
        if p.downlink_kbit_s is not None:
            dev.down.rate = p.downlink_kbit_s * 1000.0
            changed.append(f"downlink_kbit_s={p.downlink_kbit_s:g}")
        if initial:
            if p.online is False:
                dev.online = False
            return
        detail = f"scheduled_s={p.time_s:g} " + " ".join(changed)
        if p.online is False:
            self.go_offline(dev, f" (trace) {detail}")
        elif p.online is True and not dev.online:
            self.go_online(dev, f"(trace) {detail}")
        if changed:
            self.rt.ps.event(dev.device, "trace", detail)

    def _targets(self, e) -> list:
        names = set(e.classes)
        return [dev for d, dev in sorted(self.rt.devices.items()) if d in e.devices or dev.klass["name"] in names]

    def _net(self, i: int, end: bool) -> None:
        e = self.spec.events[i]
        rt = self.rt
        scheduled = e.at + (e.duration if end else 0.0)
        what = f"scheduled_s={scheduled:g} event={i}"
        if e.kind == "ps-link":
            dirs = [f for name, f in (("uplink", self.ps_in), ("downlink", self.ps_out))
                    if e.direction in (name, "both")]
            if end:
                for f, rate in self._saved.pop(i):
                    f.rate = rate
            else:
                self._saved[i] = [(f, f.rate) for f in dirs]
                for f in dirs:
                    f.rate = e.set.rate
            rt.ps.event(-1, "ps-link-end" if end else "ps-link-set",
                        f"{what} direction={e.direction}" + ("" if end else f" rate_bps={e.set.rate:g}"))
            return
        targets = self._targets(e)
        ids = ",".join(str(dev.device) for dev in targets)
        if e.kind == "partition":
            for dev in targets:
                if end:
                    self.partitioned.pop(dev.device, None)
                else:
                    self.partitioned[dev.device] = e.at + e.duration
            rt.ps.event(-1, "partition-end" if end else "partition", f"{what} devices={ids}")
            return
        if end:   # back to the value from before, unless something (a trace row) changed it since
            new = e.set.model_dump()
            for link, values in self._saved.pop(i):
                for k, v in values.items():
                    if getattr(link, k) == new[k]:
                        setattr(link, k, v)
        else:
            saved = []
            for dev in targets:
                for name, link in (("uplink", dev.up), ("downlink", dev.down)):
                    if e.direction in (name, "both"):
                        new = {k: v for k, v in e.set.model_dump().items() if v is not None}
                        saved.append((link, {k: getattr(link, k) for k in new}))
                        for k, v in new.items():
                            setattr(link, k, v)
            self._saved[i] = saved
        rt.ps.event(-1, "net-link-end" if end else "net-link",
                    f"{what} direction={e.direction} devices={ids}"
                    + ("" if end else " " + " ".join(f"{k}={v:g}" for k, v in e.set.model_dump().items()
                                                     if v is not None)))

    def _sample(self) -> None:
        rt = self.rt
        t1 = rt.now
        t0, self._last_sample = self._last_sample, t1
        for name, f in (("ingress", self.ps_in), ("egress", self.ps_out)):
            if f.rate or f.busy:
                w = f.window(t0, t1)
                rt.ps.event(-1, "ps-link", f"direction={name} window_s={t1 - t0:g} " + " ".join(
                    f"{k}={v:.6g}" for k, v in w.items()))
        rt._schedule(t1 + self.spec.ps_link.sample, _DYN, -1, (_SAMPLE, None))


_DYN = 3   # SimRuntime's event kind for these (its own are 0..2)
