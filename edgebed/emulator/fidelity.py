"""Realized fidelity: what a run achieved next to what its scenario configured.

The engine writes ``summary.json["fidelity"]`` from ``run_fidelity``: per speed class the realized
update rate against the configured compute speed, per class the uplink throughput the kernel counted
against the configured rate (runtimes that shape links in the kernel), and the host's CPU saturation
(runtimes that sample it). ``PeakRate`` turns byte-counter samples into the throughput achieved;
``class_shares`` (also a report metric) gives each class's share of the applied updates.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Optional

import pandas as pd

WINDOW_S = 1.0   # uplink throughput is measured over windows of at least this length


def class_shares(updates: pd.DataFrame) -> pd.DataFrame:
    """Per speed class: applied updates, their share, devices seen, and realized rate ratios.

    Columns: ``speed_class, updates, share`` (fraction of all applied updates), ``devices``
    (distinct devices with ≥ 1 applied update), ``updates_per_device`` and ``rate_ratio``
    (updates per device relative to the slowest class, so 100:10:1 classes give 100, 10, 1).
    Sorted by rate, fastest first. Empty frame when there are no updates.
    """
    cols = ["speed_class", "updates", "share", "devices", "updates_per_device", "rate_ratio"]
    if updates.empty:
        return pd.DataFrame(columns=cols)
    g = updates.groupby("speed_class", sort=True)
    out = pd.DataFrame({"updates": g.size(), "devices": g["device"].nunique()}).reset_index()
    out["share"] = out["updates"] / out["updates"].sum()
    out["updates_per_device"] = out["updates"] / out["devices"]
    out["rate_ratio"] = out["updates_per_device"] / out["updates_per_device"].min()
    return out.sort_values("rate_ratio", ascending=False, kind="stable")[cols].reset_index(drop=True)


class PeakRate:
    """The highest throughput of a monotone byte counter over windows of at least ``window`` s.

    Feed it samples ``add(t, total_bytes)`` in time order. The peak equals the link's achieved rate
    once the device kept its uplink busy for a whole window; before that it is a lower bound."""

    def __init__(self, window: float = WINDOW_S):
        self.window = window
        self.peak_bps = 0.0
        self._samples: deque = deque()

    def add(self, t: float, total_bytes: int) -> None:
        s = self._samples
        s.append((t, total_bytes))
        # keep the newest sample that is at least a window old as the left edge, drop older ones
        while len(s) >= 2 and t - s[1][0] >= self.window:
            s.popleft()
        t0, b0 = s[0]
        if t - t0 >= self.window:
            self.peak_bps = max(self.peak_bps, 8.0 * (total_bytes - b0) / (t - t0))


def class_rates(updates: pd.DataFrame, classes: list[dict], duration_s: float) -> list[dict]:
    """Per speed class: applied updates, share, updates per device per second and the realized rate
    ratio against the slowest class, next to the configured compute-speed ratio (slowest class's
    slowdown / this class's). Think time and link transfers are not in the configured ratio, so they
    show as a realized ratio below it. ``duration_s`` is the run's length (virtual on the sim runtime)."""
    shares = class_shares(updates).set_index("speed_class") if not updates.empty else None
    slowest = max(c["slowdown"] for c in classes)
    out = []
    for c in classes:
        row = {"class": c["name"], "slowdown": c["slowdown"], "think_time_s": c["think_time"]["mean"],
               "configured_speed_ratio": round(slowest / c["slowdown"], 4),
               "updates": 0, "share": 0.0, "devices_contributing": 0,
               "updates_per_device_per_s": None, "realized_rate_ratio": None}
        if shares is not None and c["name"] in shares.index:
            s = shares.loc[c["name"]]
            row.update(updates=int(s["updates"]), share=round(float(s["share"]), 4),
                       devices_contributing=int(s["devices"]),
                       realized_rate_ratio=round(float(s["rate_ratio"]), 4))
            if duration_s > 0:
                row["updates_per_device_per_s"] = round(float(s["updates_per_device"]) / duration_s, 4)
        out.append(row)
    return out


def uplink_rates(peaks: dict[int, float], class_of_device: dict[int, str], classes: list[dict],
                 updates: pd.DataFrame, window: float = WINDOW_S) -> list[dict]:
    """Per class with a shaped uplink: the configured rate and the peak throughput its devices'
    kernel counters showed (mean, min, max over devices). ``window_filled`` says whether the class's
    largest push keeps the link busy for a whole window at the configured rate; when it doesn't, the
    peak is a lower bound (the link idles within every window), not a rate error."""
    out = []
    for c in classes:
        rate = c["uplink"].get("rate")
        vals = [p for d, p in peaks.items() if class_of_device.get(d) == c["name"]]
        if rate is None or not vals:
            continue
        mine = updates[updates["speed_class"] == c["name"]] if not updates.empty else updates
        largest = int(mine["bytes_in"].max()) if not mine.empty else 0
        mean = sum(vals) / len(vals)
        out.append({"class": c["name"], "configured_mbit": rate / 1e6, "devices": len(vals),
                    "peak_mbit_mean": round(mean / 1e6, 4), "peak_mbit_min": round(min(vals) / 1e6, 4),
                    "peak_mbit_max": round(max(vals) / 1e6, 4), "peak_over_configured": round(mean / rate, 4),
                    "largest_push_bytes": largest,
                    "window_filled": largest * 8 / rate >= 2 * window})
    return out


def run_duration(updates: pd.DataFrame) -> float:
    """Seconds from the run's start to its last applied update: virtual time where the runtime has it."""
    if updates.empty:
        return 0.0
    v = updates["virtual_time"].max()
    return float(v) if v == v and not math.isinf(v) else float(updates["wall_time"].max())


def run_fidelity(updates: pd.DataFrame, classes: list[dict], class_of_device: dict[int, str],
                 runtime: Optional[dict] = None) -> dict:
    """The ``fidelity`` section of summary.json. ``runtime`` is ``Runtime.fidelity()``: optional
    ``uplink_peak_bps`` (device → peak bps) and ``host_cpu`` (busy share of the host's CPUs)."""
    runtime = runtime or {}
    duration = run_duration(updates)
    out = {"duration_s": round(duration, 3),
           "classes": class_rates(updates, classes, duration)}
    peaks = runtime.get("uplink_peak_bps")
    if peaks:
        out["uplink"] = uplink_rates(peaks, class_of_device, classes, updates)
        out["uplink_measured_as"] = (f"peak throughput over ≥ {WINDOW_S:g} s windows of each device's "
                                     "host-side veth counters (kernel, on-the-wire bytes)")
    if runtime.get("host_cpu"):
        out["host_cpu"] = runtime["host_cpu"]
    return out
