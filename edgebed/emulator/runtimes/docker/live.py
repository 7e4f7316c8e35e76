"""Timed link events applied live on the docker runtime: at each event's time (emulated seconds since
the agents started, × timing.dilation on the wall clock) the listed devices' qdiscs are replaced by
tbf at the new rate — the uplink on the container's eth0, the downlink on its host-side veth (with
``runtime.docker.shape_downlink``) — and at its end the speed class's rate is put back.

Only the rate changes live: delay, jitter and loss are applied by the agent on a kernel without netem
(and handed to it once, in Welcome), so ``DockerRuntime.check`` refuses events that set them. Each
change is recorded in the events table (``net-link``/``net-link-end``) with ``scheduled_s=`` and
``applied_s=`` (emulated seconds since the agents started, measured when the qdiscs were in place).
"""
from __future__ import annotations

from typing import Callable, Optional

from ..live_churn import due_in
from . import links


def change_rate(index: int, profile, netns=None, latency: float = 0.1, base_rate: Optional[float] = None) -> None:
    """Set the rate of the tbf edgebed installed on ``index`` in place (``tc qdisc change``): removing
    and re-adding it would leave the link unshaped for a moment, and the sender's full socket buffer
    would leave at line rate (the test saw a 4 mbit device at 14.6 Mbit/s after such a gap). Without a
    root tbf (an unshaped class, netem): ``links.shape``.

    The bucket keeps the depth of ``base_rate`` (the link's own rate) when that is deeper: tbf takes a
    GSO packet whole while it fits the bucket, and one queued under the deeper bucket never fits a
    shallower one — the queue stalled for the rest of the event (seen on the PS link: 4 mbit → 1 mbit,
    0 bytes sent for 6 s with 244 kB queued)."""
    with links.iproute(netns) as ipr:
        kind = links.root_qdisc(index, _ipr=ipr)
        if kind == "tbf" and profile.rate is not None:
            burst = links.tbf_burst(max(profile.rate, base_rate or 0.0))
            ipr.tc("change", "tbf", index, handle=links.ROOT_HANDLE, rate=links._rate_arg(profile.rate),
                   burst=burst, limit=links.tbf_limit(profile.rate, latency))
            return
    links.shape(index, profile, netns=netns, latency=latency)


class LiveLinkEvents:
    """The scenario's ``dynamics.events`` of kind ``link`` and ``partition``, applied by ``tick`` from the
    runtime's drive. A partition sets the container's eth0 down (every packet to and from the PS is
    dropped; TCP retransmits, as across a real outage) and up again at its end."""

    def __init__(self, runtime):
        self.rt = runtime
        events = runtime.scenario.dynamics.events
        live = ("link", "partition")
        self.todo = sorted([(e.at, i, False) for i, e in enumerate(events) if e.kind in live]
                           + [(e.at + e.duration, i, True) for i, e in enumerate(events)
                              if e.kind in live and e.duration is not None])

    @staticmethod
    def problems(scenario) -> list[str]:
        return [f"dynamics.events.{i}: the docker runtime changes only a link's rate live (delay, jitter and "
                "loss are applied by the agent on this kernel); remove set.delay/jitter/loss or use runtime sim"
                for i, e in enumerate(scenario.dynamics.events)
                if e.kind == "link" and any(v is not None for v in (e.set.delay, e.set.jitter, e.set.loss))]

    def seconds_to_next(self) -> Optional[float]:
        return due_in(self.todo, self.rt.clock)

    def tick(self, ps, record: Callable[[int, str, str], None]) -> None:
        """Apply every event now due; ``record(device, event, detail)`` (the PS's ``event``)."""
        clock = self.rt.clock
        if clock.t_running is None:
            return
        dilation = clock.dilation or 1.0
        while self.todo and clock.elapsed() / dilation >= self.todo[0][0]:
            t, i, end = self.todo.pop(0)
            e = self.rt.scenario.dynamics.events[i]
            devices = [d for d in range(self.rt.scenario.workers.n)
                       if d in e.devices or self.rt.scenario.class_of(d).name in e.classes]
            if e.kind == "partition":
                done = [d for d in devices if self._cut(d, up=end)]
                record(-1, "partition-end" if end else "partition",
                       f"scheduled_s={t:g} applied_s={clock.elapsed() / dilation:.4f} event={i} "
                       f"devices={','.join(map(str, done))}")
                continue
            done = [d for d in devices if self._shape(d, e, end)]
            applied = clock.elapsed() / dilation
            record(-1, "net-link-end" if end else "net-link",
                   f"scheduled_s={t:g} applied_s={applied:.4f} event={i} direction={e.direction} "
                   f"devices={','.join(map(str, done))}" + ("" if end else f" rate={e.set.rate:g}"))

    def _cut(self, d: int, up: bool) -> bool:
        """The container's eth0 down (partitioned from the PS) or up again."""
        rec = self.rt.record["containers"].get(str(d))
        if not rec or "eth0" not in rec:
            return False
        try:
            with links.iproute(rec["pid"]) as ipr:
                ipr.link("set", index=rec["eth0"], state="up" if up else "down")
        except Exception:   # its container (namespace) ended meanwhile
            return False
        return True

    def _shape(self, d: int, e, end: bool) -> bool:
        rec = self.rt.record["containers"].get(str(d))
        if not rec or "eth0" not in rec:
            return False   # not started (or gone)
        # the link in force: the executed scenario's class (rates dilated already) or a trace's rate;
        # at the event's end that is what comes back
        up, down = self.rt.link_profile(d, "uplink"), self.rt.link_profile(d, "downlink")
        rate = None if end else e.set.rate / (self.rt.clock.dilation or 1.0)
        try:
            if e.direction in ("uplink", "both"):
                prof = up.model_copy(update={"rate": rate or up.rate})
                change_rate(rec["eth0"], prof, netns=rec["pid"], base_rate=up.rate)
            if e.direction in ("downlink", "both") and "host_veth" in rec and self.rt.spec.shape_downlink:
                prof = down.model_copy(update={"rate": rate or down.rate})
                change_rate(rec["host_veth"], prof, base_rate=down.rate)
        except links.LinkError:
            return False   # its container ended meanwhile
        return True
