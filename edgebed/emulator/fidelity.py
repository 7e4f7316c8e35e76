"""Realized fidelity: what a run achieved next to what its scenario configured and implies.

The engine writes ``summary.json["fidelity"]`` from ``run_fidelity``: per speed class the realized
update share, rate and staleness next to the values the scenario's timing implies, with the verdict
(``emulator/verdict.py``, against ``edgebed/timing.py``'s expected timing: compute + think + waiting
time + link transfers under the runtime's link semantics), per class the uplink throughput the kernel
counted against the configured rate (runtimes that shape links in the kernel), and the host's CPU
saturation (runtimes that sample it). ``PeakRate`` turns byte-counter samples into the throughput
achieved; ``class_shares`` (also a report metric) gives each class's share of the applied updates;
``expected_frame`` is the expected-vs-realized table ``edgebed report`` shows.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Optional

import pandas as pd

from .kept_out import describe, kept_out
from .verdict import crashed_devices, expected_vs_realized, pacing_stats, verdict

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
                 runtime: Optional[dict] = None, timing: Optional[dict] = None,
                 events: Optional[pd.DataFrame] = None) -> dict:
    """The ``fidelity`` section of summary.json. ``runtime`` is ``Runtime.fidelity()``: optional
    ``uplink_peak_bps`` (device → peak bps) and ``host_cpu`` (busy share of the host's CPUs).
    ``timing`` is the engine's resolved timing (manifest ``timing`` plus ``expected``, the per-class
    rows of ``timing.expected_timing``); ``events`` the events table (paced devices' Bye stats)."""
    runtime = runtime or {}
    duration = run_duration(updates)
    out = {"duration_s": round(duration, 3),
           "classes": class_rates(updates, classes, duration)}
    timing = timing or {}
    if timing.get("expected"):
        tol = timing.get("tolerance", 0.1)
        pacing = pacing_stats(events, class_of_device)
        rows = expected_vs_realized(updates, timing["expected"], class_of_device, tol,
                                    crashed_devices(events))
        out["timing"] = {k: timing.get(k) for k in ("link_model", "step_time_s", "step_time_from",
                                                     "calibrated_step_s", "dilation", "dilation_from", "pacing")
                         if timing.get(k) is not None}
        out["expected"] = rows
        if pacing:
            out["pacing"] = pacing
        out["verdict"] = verdict(rows, pacing, tol, timing.get("dilation", 1.0))
        if timing.get("watchdog_warnings") is not None:
            out["verdict"]["watchdog_warnings"] = timing["watchdog_warnings"]
    if (k := kept_out(events, sorted(class_of_device))) is not None:   # devices the connection cap kept out
        out["kept_out"] = k
        if "verdict" in out:
            out["verdict"] = {**out["verdict"], "faithful": False, "summary": f"{out['verdict']['summary']}; {describe(k)}"}
    peaks = runtime.get("uplink_peak_bps")
    if peaks:
        out["uplink"] = uplink_rates(peaks, class_of_device, classes, updates)
        out["uplink_measured_as"] = (f"peak throughput over ≥ {WINDOW_S:g} s windows of each device's "
                                     "host-side veth counters (kernel, on-the-wire bytes)")
    if runtime.get("host_cpu"):
        out["host_cpu"] = runtime["host_cpu"]
    return out


def expected_caption(fid: dict) -> str:
    """What the expected-vs-realized table of a ``fidelity`` section compares, in one sentence."""
    t = fid.get("timing", {})
    return (f"Realized per class next to the expected value from the scenario (step time "
            f"{1e3 * t.get('step_time_s', 0):.3g} ms, {t.get('link_model', '?')} link semantics, dilation "
            f"{t.get('dilation', 1):g}); rates in emulated time, measured once every device of the class had "
            "pushed; expected staleness is mean-field (the other devices' update rate × the time from pull "
            "served to push applied)"
            + ("; crashed devices count only while alive, in the rates and in the expected shares and "
               "staleness" if any("crashed" in r for r in fid.get("expected") or []) else "") + ".")


def expected_frame(fid: dict) -> pd.DataFrame:
    """The expected-vs-realized rows of a ``fidelity`` section as a numeric frame, realized next to
    expected for each measure."""
    rows = fid.get("expected") or []
    cols = ["class", "share", "expected_share", "rate_per_device", "expected_rate_per_device", "rate_ratio",
            "expected_rate_ratio", "staleness_mean", "expected_staleness_mean", "staleness_p50"]
    if any("crashed" in r for r in rows):   # a run with crashes: how many of each class's devices
        cols.insert(1, "crashed")
    return pd.DataFrame(rows, columns=cols)
