"""Devices kept out by the PS's connection cap: who waited to join while the cap refused connections.

The PS records a ``refused-at-cap`` event at most every second while its connection gate refuses
handshakes (ps/serve.py). A device waits to join from the agents' start (the run's ``start`` event), and
again from each of its ``online`` events (a churned device started afresh), until its next ``hello``.
A device is kept out when a refusal falls in one of its waits: from that refusal to its hello (or the
run's end) it was meant to be online and could not be. The gate does not know which device a refused
connection belonged to, so this counts the devices that were waiting then — under a cap of 2·n + 16
honest devices alone never reach it, so in practice those are the ones refused. Times are the events
table's emulated seconds (``virtual_time`` where recorded, else ``wall_time``).
"""
from __future__ import annotations

import re
from typing import Optional

import pandas as pd

EVENT = "refused-at-cap"
LATE_S = 1.0   # a refusal is recorded up to one look (ps/serve.py SWEEP_EVERY) after it happened


def _times(events: pd.DataFrame) -> pd.Series:
    col = "virtual_time" if events["virtual_time"].notna().any() else "wall_time"
    return events[col].astype(float)


def kept_out(events: Optional[pd.DataFrame], devices: list[int], t_end: Optional[float] = None) -> Optional[dict]:
    """None when the cap refused nobody; else the connections it refused, the window of its refusals,
    and per device kept out the seconds it waited after the first refusal of its wait."""
    if events is None or events.empty or not (events["event"] == EVENT).any():
        return None
    t = _times(events)
    ev, dev = events["event"].to_numpy(), events["device"].astype(int).to_numpy()
    t_end = float(t.max()) if t_end is None else t_end
    refusals = sorted(t[ev == EVENT])
    refused = sum(int(m.group(1)) for m in (re.search(r"refused=(\d+)", str(x))
                                            for x in events.loc[ev == EVENT, "detail"]) if m)
    starts = t[ev == "start"]
    t_start = float(starts.min()) if len(starts) else 0.0
    out: dict[int, float] = {}
    for d in devices:
        mine = ev[dev == d], t[dev == d].to_numpy()
        waits, since = [], t_start
        for kind, at in zip(*mine):
            if kind == "hello" and since is not None:
                waits.append((since, at))
                since = None
            elif kind == "online":
                since = at
        if since is not None:
            waits.append((since, t_end))
        seconds = 0.0
        for a, b in waits:
            hit = [r for r in refusals if a <= r and r - LATE_S <= b]
            if hit:
                seconds += max(0.0, b - max(a, hit[0] - LATE_S))
        if seconds > 0:
            out[d] = round(seconds, 3)
    return {"connections_refused": refused, "first_refusal_s": round(refusals[0], 3),
            "last_refusal_s": round(refusals[-1], 3), "devices": len(out), "device_seconds": round(sum(out.values()), 3),
            "by_device": out}


def describe(k: dict) -> str:
    """One clause for a verdict's summary."""
    return (f"the connection cap refused {k['connections_refused']} connections between {k['first_refusal_s']:g} s "
            f"and {k['last_refusal_s']:g} s: {k['devices']} device{'s' if k['devices'] != 1 else ''} kept out "
            f"({k['device_seconds']:g} device-seconds)")
