"""The fidelity verdict of a run's dynamics (``dynamics:``): availability — expected against realised
online fraction per speed class — and timed events — applied at their scheduled time or not.

Both read the ``events`` table: ``offline``/``online`` rows (the device's virtual time, or emulated
time on real-time runtimes) and the ``scheduled_s=`` in the detail of timed events. The expected online
fraction of a churning class is E[online] / (E[online] + E[offline]·f̄), f̄ the diurnal factor averaged
over the run (1 without one) — the renewal-process long-run value; a device starts online, so a short
run sits above it. A trace device's expected fraction is the share of the run inside its online windows.
"""
from __future__ import annotations

import math
import re
from typing import Optional

import pandas as pd

from ..traces.format import online_windows
from .kept_out import describe, kept_out

TIMED = ("net-link", "net-link-end", "partition", "partition-end", "ps-link-set", "ps-link-end", "trace",
         "recover")
ON_TIME = 0.1   # an event is on time within this fraction of its scheduled time (the 10 %)


def _mean_factor(diurnal, t_end: float) -> float:
    if diurnal is None or t_end <= 0:
        return 1.0
    w = 2 * math.pi / diurnal.period
    avg_cos = (math.sin(w * (t_end - diurnal.peak)) - math.sin(w * -diurnal.peak)) / (w * t_end)
    return 1.0 - diurnal.amplitude * avg_cos


def realised_online(events: pd.DataFrame, device: int, t_end: float) -> float:
    """Fraction of [0, t_end] the events table records ``device`` online. A row's time is its
    ``applied_s=`` where it has one (real-time runtimes: emulated seconds since the agents started),
    else its virtual time."""
    rows = events[(events["device"] == device) & events["event"].isin(("offline", "online"))]
    applied = rows["detail"].astype(str).str.extract(r"applied_s=([0-9.eE+-]+)")[0].astype(float)
    times = applied.fillna(rows["virtual_time"])
    rows, times = rows[times <= t_end], times[times <= t_end]
    online = rows.iloc[0]["event"] != "online" if len(rows) else True   # first change "online": started away
    since, up = 0.0, 0.0
    for t, ev in zip(times, rows["event"]):
        if ev == "offline" and online:
            up += t - since
            online = False
        elif ev == "online" and not online:
            since, online = t, True
    if online:
        up += t_end - since
    return up / t_end if t_end > 0 else 1.0


def availability_rows(events: pd.DataFrame, dynamics, class_of_device: dict[int, str], t_end: float,
                      trace: Optional[dict], tolerance: float, out_s: Optional[dict] = None) -> list[dict]:
    """Per speed class with churn or trace devices: expected and realised online fraction. ``out_s``:
    device → seconds the connection cap kept it out (emulator/kept_out.py), not online time."""
    out, out_s = [], out_s or {}
    trace = trace or {}
    for name in sorted(set(class_of_device.values())):
        devices = [d for d, c in class_of_device.items() if c == name]
        churn = dynamics.availability.classes.get(name)
        if churn is None and not any(d in trace for d in devices):
            continue
        expected, realised = [], []
        for d in devices:
            if d in trace and any(p.online is not None for p in trace[d]):
                exp = sum(b - a for a, b in online_windows(trace[d], t_end)) / t_end
            elif churn is not None:
                on, off = churn.online.mean, churn.offline.mean * _mean_factor(churn.diurnal, t_end)
                exp = on / (on + off)
            else:
                exp = 1.0
            expected.append(exp)
            realised.append(max(0.0, realised_online(events, d, t_end) - out_s.get(d, 0.0) / t_end)
                            if t_end > 0 else realised_online(events, d, t_end))
        e, r = sum(expected) / len(expected), sum(realised) / len(realised)
        sd = (sum((x - r) ** 2 for x in realised) / (len(realised) - 1)) ** 0.5 if len(realised) > 1 else 0.0
        se = sd / len(realised) ** 0.5
        out.append({"class": name, "devices": len(devices), "expected_online": round(e, 4),
                    "realised_online": round(r, 4), "standard_error": round(se, 4),
                    "within_tolerance": abs(r - e) <= tolerance * e + 2 * se})
    return out


def event_rows(events: pd.DataFrame) -> list[dict]:
    """Each timed event the events table records: scheduled and applied time, on time or not."""
    rows = events[events["event"].isin(TIMED)]
    out = []
    for t, ev, d, detail in zip(rows["virtual_time"], rows["event"], rows["device"], rows["detail"]):
        m = re.search(r"scheduled_s=([0-9.eE+-]+)", str(detail))
        if not m:
            continue
        s = float(m.group(1))
        real = re.search(r"applied_s=([0-9.eE+-]+)", str(detail))   # real-time runtimes measure it
        t = float(real.group(1)) if real else t
        late = float(t) - s
        out.append({"event": ev, "device": int(d), "scheduled_s": s, "applied_s": round(float(t), 6),
                    "late_s": round(late, 6), "on_time": abs(late) <= max(ON_TIME * s, 1e-6)})
    return out


def dynamics_fidelity(events: pd.DataFrame, dynamics, class_of_device: dict[int, str], t_end: float,
                      trace: Optional[dict] = None, tolerance: float = 0.1) -> dict:
    """The ``fidelity.dynamics`` section: availability rows, event rows and their verdict."""
    k = kept_out(events, sorted(class_of_device))
    avail = availability_rows(events, dynamics, class_of_device, t_end, trace, tolerance,
                              k["by_device"] if k else None)
    timed = event_rows(events)
    late = [r for r in timed if not r["on_time"]]
    off = [r["class"] for r in avail if not r["within_tolerance"]]
    summary = (f"{len(timed) - len(late)} of {len(timed)} timed events applied on time"
               + (f", {len(late)} late" if late else "")
               + (f"; online fraction off its expected value in {', '.join(off)}" if off else
                  "; online fraction per class as expected" if avail and not k else
                  "; online fraction per class, less the time kept out, within tolerance" if avail else "")
               + (f"; {describe(k)}" if k else ""))
    return {"duration_s": round(t_end, 3), "availability": avail, "events": timed,
            **({"kept_out": k} if k else {}),
            "verdict": {"faithful": not late and not off and not k, "summary": summary, "events_on_time": len(timed) - len(late),
                        "events_late": len(late), "classes_off_availability": off,
                        "checks": f"timed events applied within {ON_TIME:.0%} of their scheduled time; realised "
                                  f"online fraction per class within {tolerance:.0%} (plus two standard errors) "
                                  "of the expected long-run value"}}
