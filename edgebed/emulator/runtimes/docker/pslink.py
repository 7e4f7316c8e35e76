"""The PS's shared link on the docker runtime (``dynamics.ps_link``), shaped in the kernel at the PS.

The run's bridge is the PS's interface (the PS binds its gateway address), so

* **egress** (PS → devices): a tbf on the bridge device — every reply the PS sends a container leaves
  through it, all devices' in one queue;
* **ingress** (devices → PS): the bridge's ingress redirected (mirred) to an ifb device of this run
  (``ebps<hash of the run id>``, recorded in docker.json for ``edgebed clean``) whose tbf queues what
  every device sends the PS, in one queue.

Each queue holds ``QUEUE_S`` seconds at the link's rate (tbf's limit); beyond it packets are dropped and
TCP backs off — a real access link, where the virtual clock's FIFO is unbounded. ``ps-link`` events
change the tbf's rate in place (``live.change_rate``). Every ``ps_link.sample`` seconds the events table
gets one ``ps-link`` row per direction, with the virtual clock's fields: ``utilisation`` (bytes the tbf
sent in the window × 8 / (rate × window)), ``queue_mean_s``/``queue_max_s`` (its backlog × 8 / rate,
sampled every engine tick: the wait of a packet entering then), ``messages`` (packets), ``bytes``, plus
``drops`` and ``at_s`` (emulated seconds since the agents started). Rates are the scenario's divided by
``timing.dilation``.
"""
from __future__ import annotations

import hashlib
from types import SimpleNamespace
from typing import Callable, Optional

from . import links
from .live import change_rate

QUEUE_S = 0.5          # seconds of queue at the link's rate before tbf drops


def ifb_name(run_id: str) -> str:
    """This run's ingress ifb device (at most 15 characters, an interface name's limit)."""
    return "ebps" + hashlib.sha1(run_id.encode()).hexdigest()[:10]


def _stats(index: int) -> dict:
    with links.iproute() as ipr:
        for q in ipr.get_qdiscs(index=index):
            if q.get_attr("TCA_KIND") == "tbf":
                st = q.get_attr("TCA_STATS")
                return {"bytes": st["bytes"], "packets": st["packets"], "drops": st["drop"],
                        "backlog": st["backlog"]}
    return {}


class _Direction:
    def __init__(self, name: str, index: int, rate: float):
        self.name, self.index, self.rate = name, index, rate
        self.last = _stats(index)
        self.queue: list[float] = []

    def sample_queue(self) -> None:
        st = _stats(self.index)
        if st:
            self.queue.append(st["backlog"] * 8.0 / self.rate)

    def window(self, window_s: float) -> dict:
        st = _stats(self.index)
        if not st:
            return {}
        d = {k: st[k] - self.last.get(k, 0) for k in ("bytes", "packets", "drops")}
        self.last = st
        q, self.queue = self.queue or [st["backlog"] * 8.0 / self.rate], []
        return {"utilisation": d["bytes"] * 8.0 / (self.rate * window_s), "queue_mean_s": sum(q) / len(q),
                "queue_max_s": max(q), "messages": d["packets"], "bytes": d["bytes"], "drops": d["drops"]}


class PSLink:
    """Installs the shared link (``install``, once the bridge exists), applies ``ps-link`` events and
    records the samples from the runtime's drive (``tick``); ``runtime``: a DockerRuntime."""

    def __init__(self, runtime):
        self.rt = runtime
        self.spec = runtime.scenario.dynamics.ps_link
        self.dirs: dict[str, _Direction] = {}
        self.events = sorted([(e.at, i, False) for i, e in enumerate(runtime.scenario.dynamics.events)
                              if e.kind == "ps-link"]
                             + [(e.at + e.duration, i, True) for i, e in enumerate(runtime.scenario.dynamics.events)
                                if e.kind == "ps-link" and e.duration is not None])
        self.next_sample, self.last_t = self.spec.sample, 0.0
        self.ended = False

    def _dilation(self) -> float:
        return self.rt.clock.dilation or 1.0

    def install(self) -> dict:
        """Shape the bridge: → what docker.json records (``ps_link``)."""
        bridge = self.rt.record["network"]["bridge"]
        index = links.ifindex(bridge)
        out = {"bridge": bridge, "queue_s": QUEUE_S}
        k = self._dilation()
        if self.spec.egress:
            links.shape(index, SimpleNamespace(rate=self.spec.egress / k, delay=0.0, jitter=0.0, loss=0.0),
                        latency=QUEUE_S)
            self.dirs["egress"] = _Direction("egress", index, self.spec.egress / k)
            out["egress_bps"] = self.spec.egress / k
        if self.spec.ingress:
            ifb = ifb_name(self.rt.run_id)
            out["ifb"] = ifb     # recorded before it exists: a failure half-way is still cleaned up
            self.rt.record["ps_link"] = out
            links.shape_ingress(index, self.spec.ingress / k, latency=QUEUE_S, ifb=ifb)
            self.dirs["ingress"] = _Direction("ingress", links.ifindex(ifb), self.spec.ingress / k)
            out["ingress_bps"] = self.spec.ingress / k
        self.rt.record["ps_link"] = out
        return out

    def seconds_to_next(self) -> Optional[float]:
        clock = self.rt.clock
        if clock.t_running is None or self.ended:
            return None
        nxt = min([self.next_sample] + [t for t, _, _ in self.events[:1]])
        return max(0.0, nxt * self._dilation() - clock.elapsed())

    def tick(self, ps, record: Callable[[int, str, str], None]) -> None:
        clock = self.rt.clock
        if clock.t_running is None or self.ended or not self.dirs:
            return
        now = clock.elapsed() / self._dilation()
        for d in self.dirs.values():
            d.sample_queue()
        if self.events and now >= self.events[0][0]:
            self._sample(now, record)        # a window never straddles a change of rate
            while self.events and now >= self.events[0][0]:
                self._event(*self.events.pop(0), record)
        if now >= self.next_sample or ps.stopped is not None:
            self._sample(now, record)
        if ps.stopped is not None:
            self.ended = True

    def _sample(self, now: float, record) -> None:
        window = now - self.last_t
        for d in self.dirs.values() if window > 0 else ():
            w = d.window(window * self._dilation())
            if w:
                record(-1, "ps-link", f"direction={d.name} window_s={window:.4g} at_s={now:.4f} "
                       + " ".join(f"{k}={v:.6g}" for k, v in w.items()))
        self.last_t, self.next_sample = now, now + self.spec.sample

    def _event(self, t: float, i: int, end: bool, record) -> None:
        e = self.rt.scenario.dynamics.events[i]
        k = self._dilation()
        done = []
        for name, d in self.dirs.items():
            if e.direction in ("both", "uplink" if name == "ingress" else "downlink"):
                base = self.spec.ingress if name == "ingress" else self.spec.egress
                d.rate = (base if end else e.set.rate) / k
                change_rate(d.index, SimpleNamespace(rate=d.rate, delay=0.0, jitter=0.0, loss=0.0),
                            latency=QUEUE_S, base_rate=base / k)
                done.append(name)
        record(-1, "ps-link-end" if end else "ps-link-set",
               f"scheduled_s={t:g} applied_s={self.rt.clock.elapsed() / k:.4f} event={i} "
               f"direction={e.direction} links={','.join(done)}" + ("" if end else f" rate_bps={e.set.rate:g}"))
