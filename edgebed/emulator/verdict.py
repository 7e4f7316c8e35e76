"""Fidelity verdict: a run's realized class shares, rates and staleness against its expected timing.

``timing.expected_timing`` says what the scenario implies; this module measures the run against it
(per class, steady state: rate per device, share of updates, mean staleness), collects the paced
devices' overruns from their Bye events, and writes the verdict ``summary.json["fidelity"]`` carries:
what it checks, its kind (faithful | slower host | distorted | not judged: a host that runs every class
slower by one factor keeps the heterogeneity, unlike one that distorts it), which classes were off
and by how much, and a dilation that would help. The engine's watchdog uses the same measure during the run.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from ..device_agent.pacing import PacingStats
from ..timing import distortion, steady_rates

STALENESS_FACTOR = 2.0   # mean staleness is judged within this many times the rate/share tolerance


def checks(tolerance: float) -> str:
    """What the verdict checks, in one sentence (the report and the run's summary say it)."""
    return (f"per speed class, in emulated time: rate per device and share of applied updates within "
            f"{tolerance:.0%} of the values the scenario's timing implies, mean staleness τ at most "
            f"{STALENESS_FACTOR * tolerance:.0%} above its mean-field value (each plus two standard errors)")


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
        st = PacingStats.of_bye(str(e["detail"]))
        k = class_of_device.get(int(e["device"]))
        if st is None or k is None:
            continue
        agg = out.setdefault(k, {"devices": 0, "steps": 0, "overruns": 0, "overrun_s": 0.0,
                                 "max_overrun_s": 0.0, "lags": 0, "lag_s": 0.0, "budget_s": st.budget_s})
        agg["devices"] += 1
        for key in ("steps", "overruns", "overrun_s", "lags", "lag_s"):
            agg[key] += getattr(st, key)
        agg["max_overrun_s"] = max(agg["max_overrun_s"], st.max_overrun_s)
    for agg in out.values():
        agg["overrun_share"] = round(agg["overruns"] / agg["steps"], 4) if agg["steps"] else 0.0
        agg["overrun_s"], agg["lag_s"] = round(agg["overrun_s"], 4), round(agg["lag_s"], 4)
    return out


def crashed_devices(events: Optional[pd.DataFrame]) -> set[int]:
    """The devices the events table records as crashed (fail-stop)."""
    if events is None or events.empty:
        return set()
    return set(events.loc[events["event"] == "crash", "device"].astype(int))


def expected_vs_realized(updates: pd.DataFrame, expected: list[dict], class_of_device: dict[int, str],
                         tolerance: float, crashed: frozenset[int] = frozenset()) -> list[dict]:
    """Per class: expected and realized update share, rate per device (steady state: from the moment
    the class's last device first pushed), rate ratio against the slowest class and staleness, each
    realized value with its relative error; ``distorted`` lists the measures off by more than the
    tolerance plus two standard errors of the class's update count.

    ``crashed`` (``crashed_devices``): these count only while alive, i.e. until their last push (the
    crash is drawn right after it) — in the rates (alive device-seconds), in the expected shares (each
    class's expected rate × its alive device-seconds over the run) and in the expected staleness (the
    devices alive at each push, averaged over the class's pushes). Without crashes these are the
    scenario's expected values unchanged."""
    t = emulated_times(updates) if not updates.empty else pd.Series(dtype=float)
    times = {int(d): sorted(g.tolist()) for d, g in t.groupby(updates["device"])} if not updates.empty else {}
    ended = {d: times[d][-1] for d in crashed if d in times}   # device → time of its crash
    rates = steady_rates(times, class_of_device, ended=ended)
    total = len(updates)
    slow_exp = min(r["rate_per_device"] for r in expected)
    realized_rates = [rates[r["class"]]["rate_per_device"] for r in expected if r["class"] in rates]
    slow_real = min(realized_rates) if realized_rates else None
    share_exp = {e["class"]: e["share"] for e in expected}
    stale_exp = {e["class"]: e["staleness_mean"] for e in expected}
    crashed_in = {k: sum(1 for d in ended if class_of_device.get(d) == k) for k in share_exp}
    if ended and total:
        share_exp, stale_exp = _with_crashes(t, updates, expected, class_of_device, ended)
    rows = []
    for e in expected:
        k = e["class"]
        mine = updates[updates["speed_class"] == k] if total else updates
        n = len(mine)
        row = {"class": k, "devices": e["devices"], "expected_cycle_s": e["cycle_s"],
               "expected_share": round(share_exp[k], 4), "share": round(n / total, 4) if total else None,
               "expected_rate_per_device": round(e["rate_per_device"], 4), "rate_per_device": None,
               "expected_rate_ratio": round(e["rate_per_device"] / slow_exp, 4), "rate_ratio": None,
               "expected_staleness_mean": round(stale_exp[k], 3),
               "staleness_mean": round(float(mine["staleness"].mean()), 3) if n else None,
               "staleness_p50": float(mine["staleness"].median()) if n else None, "distorted": {}}
        if ended:
            row["crashed"] = crashed_in[k]
        r = rates.get(k)
        if r is not None:
            row["rate_per_device"] = round(r["rate_per_device"], 4)
            row["rate_ratio"] = round(r["rate_per_device"] / slow_real, 4)
            off = distortion(e["rate_per_device"], r, tolerance)
            if off is not None:
                row["distorted"]["rate_per_device"] = round(off, 4)
        if n and share_exp[k] > 0:
            off = n / total / share_exp[k] - 1.0
            if abs(off) > tolerance + 2.0 / math.sqrt(n):
                row["distorted"]["share"] = round(off, 4)
        if n > 1 and stale_exp[k] > 0:
            # Only staleness above the mean-field expectation is judged, with a wider band
            # (STALENESS_FACTOR × tolerance) plus two standard errors of the class's mean τ: queues and
            # a loaded host add staleness, while the mean-field value itself overestimates the fast
            # classes' τ on the virtual clock (the reference), so a lower τ is no sign of distortion.
            tau = mine["staleness"].astype(float)
            off = float(tau.mean()) / stale_exp[k] - 1.0
            if off > STALENESS_FACTOR * tolerance + 2.0 * float(tau.std()) / math.sqrt(n) / stale_exp[k]:
                row["distorted"]["staleness_mean"] = round(off, 4)
        rows.append(row)
    return rows


def _with_crashes(t: pd.Series, updates: pd.DataFrame, expected: list[dict], class_of_device: dict[int, str],
                  ended: dict[int, float]) -> tuple[dict, dict]:
    """Expected share and mean staleness per class when some devices crashed (see expected_vs_realized).
    Share: r_k·A_k / Σ_j r_j·A_j, A_k = the class's alive device-seconds between the first and the last
    update. Staleness: mean-field as in ``timing.expected_timing`` — (Σ_j alive_j(t)·r_j − r_k) × the
    class's interval (pull served → push applied) — with alive_j(t) the class's devices not yet crashed
    at each of its pushes."""
    t0, t1 = float(t.min()), float(t.max())
    exp = {e["class"]: e for e in expected}
    alive_s = {k: e["devices"] * (t1 - t0) for k, e in exp.items()}
    by_class: dict[str, list[float]] = {k: [] for k in exp}
    for d, te in ended.items():
        k = class_of_device.get(d)
        if k in exp:
            alive_s[k] -= t1 - min(max(te, t0), t1)
            by_class[k].append(te)
    ends = {k: np.sort(v) for k, v in by_class.items()}   # each class's crash times
    weight = {k: exp[k]["rate_per_device"] * alive_s[k] for k in exp}
    total_w = sum(weight.values())
    share = {k: (weight[k] / total_w if total_w > 0 else exp[k]["share"]) for k in exp}
    full_rate = sum(e["devices"] * e["rate_per_device"] for e in exp.values())
    stale = {}
    for k, e in exp.items():
        pushes = t[updates["speed_class"] == k].to_numpy()
        if not len(pushes):
            stale[k] = e["staleness_mean"]
            continue
        # total expected update rate at each push: every class's devices alive then × its rate
        rate = np.zeros(len(pushes))
        for j, ej in exp.items():
            gone = np.searchsorted(ends[j], pushes, side="left")   # crashed strictly before
            rate += (ej["devices"] - gone) * ej["rate_per_device"]
        others = full_rate - e["rate_per_device"]   # the interval, from the no-crash expectation
        interval = e["staleness_mean"] / others if others > 0 else 0.0
        stale[k] = float(np.mean((rate - e["rate_per_device"]) * interval))
    return share, stale


def _uniformly_slow(judged: list[dict], distorted: list[dict], tolerance: float) -> bool:
    """Every class slowed by about the same factor, nothing but rates off: a host slower than the
    scenario's step time (e.g. unpaced, or loaded), not a distorted heterogeneity."""
    if any(set(d) - {"class", "rate_per_device_off"} for d in distorted):
        return False
    factors = [r["rate_per_device"] / r["expected_rate_per_device"] for r in judged]
    return all(f < 1 for f in factors) and max(factors) <= (1 + tolerance) * min(factors)


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
        # enough to restore the slowest class's rate, and to fit the steps of classes that overran most
        # of their budgets (budget + mean excess = the real step) with room to spare
        need = [dilation * 1.2 / min(slow)]
        need += [dilation * 1.5 * (p["budget_s"] + p["overrun_s"] / p["overruns"]) / p["budget_s"]
                 for p in pacing.values() if p["overruns"] and p["overrun_share"] > 0.5 and p["budget_s"] > 0]
        out["suggested_dilation"] = math.ceil(10 * max(need)) / 10
    if lagging:
        out["fell_behind"] = {k: {"lags": p["lags"], "seconds": p["lag_s"]} for k, p in lagging.items()}
    overran = {k: p for k, p in pacing.items() if p["overruns"]}
    if overran:
        out["overran"] = {k: {"share_of_steps": p["overrun_share"], "mean_excess_s":
                              round(p["overrun_s"] / p["overruns"], 6), "max_excess_s": p["max_overrun_s"]}
                          for k, p in overran.items()}
    parts = [f"{d['class']} " + ", ".join(f"{m.removesuffix('_off').replace('_', ' ')} {v:+.0%}"
                                          for m, v in d.items() if m != "class") for d in distorted]
    out["checks"] = checks(tolerance)
    out["kind"] = ("not judged" if not judged else "faithful" if not distorted
                   else "slower host" if _uniformly_slow(judged, distorted, tolerance) else "distorted")
    try_dilation = f" (try timing.dilation: {out['suggested_dilation']:g})" if slow else ""
    if out["kind"] == "slower host":
        factors = [r["rate_per_device"] / r["expected_rate_per_device"] for r in judged]
        out["host_speed"] = round(sum(factors) / len(factors), 4)
        kept = ("one speed class, so no heterogeneity to distort" if len(judged) == 1 else
                "rate ratios, shares and staleness between classes as expected: the heterogeneity is kept")
        out["summary"] = (f"slower host: every class ran at {out['host_speed']:.0%} of its expected rate per "
                          f"device ({'; '.join(parts)}); {kept}; emulated time runs slower than the "
                          f"scenario's timing{try_dilation}")
    else:
        out["summary"] = ("not judged: no class had a steady-state update rate" if not judged else
                          f"faithful: every class within {tolerance:.0%} of its expected rate and share, "
                          f"its staleness at most {STALENESS_FACTOR * tolerance:.0%} above the expected"
                          if not distorted else "distorted: " + "; ".join(parts) + try_dilation)
    notes = [f"{k}: compute overran its {p['budget_s'] * 1e3:.3g} ms budget in {p['overrun_share']:.0%} of "
             f"steps (mean +{p['overrun_s'] / p['overruns'] * 1e3:.3g} ms)" for k, p in overran.items()]
    notes += [f"{k}: fell behind its schedule {p['lags']} times ({p['lag_s']:.3g} s of real time lost, all devices)" for k, p in lagging.items()]
    if notes:
        out["summary"] += "; " + "; ".join(notes)
    return out
