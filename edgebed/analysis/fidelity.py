"""Realized fidelity: what a run achieved next to what its scenario configured and implies.

The engine writes ``summary.json["fidelity"]`` from ``run_fidelity``: per speed class the realized
update share, rate and staleness next to the values the scenario's timing implies (``edgebed/timing.py``:
compute + think + waiting time + link transfers under the runtime's link semantics), a verdict naming
the classes that were distorted and by how much (with the paced devices' compute overruns), per class
the uplink throughput the kernel counted against the configured rate (runtimes that shape links in the
kernel), and the host's CPU saturation (runtimes that sample it). ``PeakRate`` turns byte-counter
samples into the throughput achieved.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Optional

import numpy as np
import pandas as pd

from ..device_agent.pacing import parse_bye
from ..timing import distortion, steady_rates
from .metrics import class_shares

WINDOW_S = 1.0   # uplink throughput is measured over windows of at least this length


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


def emulated_times(updates: pd.DataFrame) -> pd.Series:
    """Each update's time in emulated seconds: virtual time where the runtime has it, else wall time."""
    v = updates["virtual_time"]
    return updates["wall_time"] if v.isna().any() or not np.isfinite(v).all() else v


def pacing_stats(events: Optional[pd.DataFrame], class_of_device: dict[int, str]) -> dict:
    """Per class, the paced devices' compute overruns and schedule lags from their Bye events."""
    out: dict = {}
    if events is None or events.empty:
        return out
    for _, e in events[events["event"] == "bye"].iterrows():
        st = parse_bye(str(e["detail"]))
        k = class_of_device.get(int(e["device"]))
        if st is None or k is None:
            continue
        agg = out.setdefault(k, {"devices": 0, "steps": 0, "overruns": 0, "overrun_s": 0.0,
                                 "max_overrun_s": 0.0, "lags": 0, "lag_s": 0.0, "budget_s": st["budget_s"]})
        agg["devices"] += 1
        for key in ("steps", "overruns", "overrun_s", "lags", "lag_s"):
            agg[key] += st[key]
        agg["max_overrun_s"] = max(agg["max_overrun_s"], st["max_overrun_s"])
    for agg in out.values():
        agg["overrun_share"] = round(agg["overruns"] / agg["steps"], 4) if agg["steps"] else 0.0
        agg["overrun_s"], agg["lag_s"] = round(agg["overrun_s"], 4), round(agg["lag_s"], 4)
    return out


def expected_vs_realized(updates: pd.DataFrame, expected: list[dict], class_of_device: dict[int, str],
                         tolerance: float) -> list[dict]:
    """Per class: expected and realized update share, rate per device (steady state: from the moment
    the class's last device first pushed), rate ratio against the slowest class and staleness, each
    realized value with its relative error; ``distorted`` lists the measures off by more than the
    tolerance plus two standard errors of the class's update count."""
    t = emulated_times(updates) if not updates.empty else pd.Series(dtype=float)
    times = {int(d): sorted(g.tolist()) for d, g in t.groupby(updates["device"])} if not updates.empty else {}
    rates = steady_rates(times, class_of_device)
    total = len(updates)
    slow_exp = min(r["rate_per_device"] for r in expected)
    realized_rates = [rates[r["class"]]["rate_per_device"] for r in expected if r["class"] in rates]
    slow_real = min(realized_rates) if realized_rates else None
    rows = []
    for e in expected:
        k = e["class"]
        mine = updates[updates["speed_class"] == k] if total else updates
        n = len(mine)
        row = {"class": k, "devices": e["devices"], "expected_cycle_s": e["cycle_s"],
               "expected_share": round(e["share"], 4), "share": round(n / total, 4) if total else None,
               "expected_rate_per_device": round(e["rate_per_device"], 4), "rate_per_device": None,
               "expected_rate_ratio": round(e["rate_per_device"] / slow_exp, 4), "rate_ratio": None,
               "expected_staleness_mean": round(e["staleness_mean"], 3),
               "staleness_mean": round(float(mine["staleness"].mean()), 3) if n else None,
               "staleness_p50": float(mine["staleness"].median()) if n else None, "distorted": {}}
        r = rates.get(k)
        if r is not None:
            row["rate_per_device"] = round(r["rate_per_device"], 4)
            row["rate_ratio"] = round(r["rate_per_device"] / slow_real, 4)
            off = distortion(e["rate_per_device"], r, tolerance)
            if off is not None:
                row["distorted"]["rate_per_device"] = round(off, 4)
        if n and e["share"] > 0:
            off = n / total / e["share"] - 1.0
            if abs(off) > tolerance + 2.0 / math.sqrt(n):
                row["distorted"]["share"] = round(off, 4)
        rows.append(row)
    return rows


def verdict(rows: list[dict], pacing: dict, tolerance: float, dilation: float) -> dict:
    """Faithful or not, which classes were distorted and by how much, and a dilation that would help."""
    distorted = [{"class": r["class"], **{f"{m}_off": v for m, v in r["distorted"].items()}}
                 for r in rows if r["distorted"]]
    lagging = {k: p for k, p in pacing.items() if p["lags"]}
    slow = [r["rate_per_device"] / r["expected_rate_per_device"] for r in rows
            if r["rate_per_device"] and r["distorted"].get("rate_per_device", 0) < 0]
    judged = [r for r in rows if r["rate_per_device"] is not None]
    out = {"faithful": bool(judged) and not distorted, "tolerance": tolerance, "distorted": distorted,
           "dilation": dilation}
    if slow:
        out["suggested_dilation"] = math.ceil(10 * dilation * 1.2 / min(slow)) / 10
    if lagging:
        out["fell_behind"] = {k: {"lags": p["lags"], "seconds": p["lag_s"]} for k, p in lagging.items()}
    overran = {k: p for k, p in pacing.items() if p["overruns"]}
    if overran:
        out["overran"] = {k: {"share_of_steps": p["overrun_share"], "mean_excess_s":
                              round(p["overrun_s"] / p["overruns"], 6), "max_excess_s": p["max_overrun_s"]}
                          for k, p in overran.items()}
    parts = [f"{d['class']} " + ", ".join(f"{m.removesuffix('_off').replace('_', ' ')} {v:+.0%}"
                                          for m, v in d.items() if m != "class") for d in distorted]
    out["summary"] = ("not judged: no class had a steady-state update rate" if not judged else
                      "faithful: every class within its expected rate and share"
                      if not distorted else "distorted: " + "; ".join(parts)
                      + (f" (try timing.dilation: {out['suggested_dilation']:g})" if slow else ""))
    notes = [f"{k}: compute overran its {p['budget_s'] * 1e3:.3g} ms budget in {p['overrun_share']:.0%} of "
             f"steps (mean +{p['overrun_s'] / p['overruns'] * 1e3:.3g} ms)" for k, p in overran.items()]
    notes += [f"{k}: fell behind its schedule {p['lags']} times ({p['lag_s']:.3g} s of real time lost, all devices)" for k, p in lagging.items()]
    if notes:
        out["summary"] += "; " + "; ".join(notes)
    return out


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
        rows = expected_vs_realized(updates, timing["expected"], class_of_device, tol)
        out["timing"] = {k: timing.get(k) for k in ("link_model", "step_time_s", "step_time_from",
                                                     "calibrated_step_s", "dilation", "pacing")
                         if timing.get(k) is not None}
        out["expected"] = rows
        if pacing:
            out["pacing"] = pacing
        out["verdict"] = verdict(rows, pacing, tol, timing.get("dilation", 1.0))
        if timing.get("watchdog_warnings") is not None:
            out["verdict"]["watchdog_warnings"] = timing["watchdog_warnings"]
    peaks = runtime.get("uplink_peak_bps")
    if peaks:
        out["uplink"] = uplink_rates(peaks, class_of_device, classes, updates)
        out["uplink_measured_as"] = (f"peak throughput over ≥ {WINDOW_S:g} s windows of each device's "
                                     "host-side veth counters (kernel, on-the-wire bytes)")
    if runtime.get("host_cpu"):
        out["host_cpu"] = runtime["host_cpu"]
    return out


def expected_markdown(fid: dict) -> list[str]:
    """The expected-vs-realized table and the verdict of a ``fidelity`` section, as markdown lines."""
    rows, v = fid.get("expected"), fid.get("verdict")
    if not rows:
        return []
    t = fid.get("timing", {})
    pct = lambda x: "—" if x is None else f"{100 * x:.1f} %"  # noqa: E731
    num = lambda x: "—" if x is None else f"{x:.4g}"  # noqa: E731
    lines = [f"Expected from the scenario (step time {1e3 * t.get('step_time_s', 0):.3g} ms, "
             f"{t.get('link_model', '?')} link semantics, dilation {t.get('dilation', 1):g}) vs realized "
             "(rates in emulated time, measured once every device of the class had pushed):", "",
             "| class | update share | updates/s per device | rate ratio | staleness mean | staleness p50 |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['class']} | {pct(r['share'])} ({pct(r['expected_share'])}) | "
                     f"{num(r['rate_per_device'])} ({num(r['expected_rate_per_device'])}) | "
                     f"{num(r['rate_ratio'])} ({num(r['expected_rate_ratio'])}) | "
                     f"{num(r['staleness_mean'])} ({num(r['expected_staleness_mean'])}) | {num(r['staleness_p50'])} |")
    lines += ["", "Realized (expected); expected staleness is mean-field: the other devices' update rate × "
              "the time from pull served to push applied.", ""]
    if v:
        lines += [f"**Verdict:** {v['summary']}.", ""]
    return lines
