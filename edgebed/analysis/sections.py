"""Sections of a run report that both report.md (``report``) and report.html (``run_page``) show:
the kernel's on-the-wire bytes beside the PS payload, and the realized fidelity, as data frames/text.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from .runs import Run
from ..rundir import read_json


def wire_vs_payload(run: Run) -> Optional[pd.DataFrame]:
    """Per speed class: bytes the PS counted (message payload) next to the bytes the kernel counted on
    the devices' uplinks (TCP/IP headers, retransmissions, handshakes included). None unless the run
    has kernel counters (Docker runtime)."""
    kernel = read_json(run.path, "kernel_traffic.json")
    if not kernel.get("classes"):
        return None
    payload = read_json(run.path, "traffic.json").get("by_class", {})
    rows = []
    for klass, k in kernel["classes"].items():
        ps_in = payload.get(klass, {}).get("in_bytes", 0)
        rows.append({"class": klass, "devices": k.get("devices"), "ps_payload_in_mb": ps_in / 1e6,
                     "kernel_uplink_mb": k["uplink_bytes"] / 1e6,
                     "overhead_pct": 100.0 * (k["uplink_bytes"] - ps_in) / ps_in if ps_in else float("nan")})
    ps = kernel.get("ps", {})
    total_in = sum(v.get("in_bytes", 0) for v in payload.values())
    rows.append({"class": "PS interface", "devices": None, "ps_payload_in_mb": total_in / 1e6,
                 "kernel_uplink_mb": ps.get("ingress_bytes", 0) / 1e6,
                 "overhead_pct": 100.0 * (ps.get("ingress_bytes", 0) - total_in) / total_in if total_in else float("nan")})
    return pd.DataFrame(rows)


def fidelity_tables(run: Run) -> list[tuple[str, pd.DataFrame]]:
    """summary.json's ``fidelity`` section as (caption, numeric frame) pairs; none for a run with one
    class and no runtime measurements, where it has nothing to compare."""
    from ..emulator.fidelity import expected_caption, expected_frame
    fid = run.summary.get("fidelity") or {}
    out = []
    if fid.get("expected"):   # realized next to what the scenario's timing implies, per class
        frame = expected_frame(fid)
        for c in ("share", "expected_share"):   # fractions → % (the column names say so)
            frame[c] = frame[c].astype(float) * 100
        out.append((expected_caption(fid), frame.rename(columns={"share": "share_pct",
                                                                 "expected_share": "expected_share_pct"})))
    elif len(fid.get("classes", [])) > 1:   # older runs: the compute-only configured ratio
        out.append(("Update rate per class relative to the slowest: configured compute speed vs realized "
                    "(think time and link transfers lower the realized ratio).",
                    pd.DataFrame(fid["classes"])[["class", "configured_speed_ratio", "realized_rate_ratio",
                                                  "updates_per_device_per_s", "think_time_s"]]))
    dyn = fid.get("dynamics") or {}
    if dyn.get("availability"):
        out.append(("Availability (dynamics): realised online fraction per class next to the expected "
                    "long-run value E[online] / (E[online] + E[offline]) (trace devices: their online windows).",
                    pd.DataFrame(dyn["availability"])))
    if dyn.get("events"):
        out.append(("Timed events (dynamics): scheduled and applied time, in emulated seconds.",
                    pd.DataFrame(dyn["events"])))
    if fid.get("uplink"):
        out.append((f"Uplink: {fid['uplink_measured_as']}; where a push does not fill a window the peak is "
                     "a lower bound.",
                     pd.DataFrame(fid["uplink"])[["class", "configured_mbit", "peak_mbit_mean", "peak_mbit_min",
                                                  "peak_mbit_max", "window_filled"]]))
    return out


def fidelity_text(run: Run) -> list[str]:
    fid = run.summary.get("fidelity") or {}
    verdict, cpu = fid.get("verdict"), fid.get("host_cpu")
    out = [f"Verdict: {verdict['summary']}."] if verdict else []
    if verdict and verdict.get("checks"):
        out.append(f"It checks {verdict['checks']}.")
    if not cpu:
        return out
    return out + [f"Host CPU: {100 * cpu['busy_mean']:.0f} % busy on average, saturated (> 95 %) in "
            f"{100 * cpu['saturated_share']:.0f} % of {cpu['samples']} samples."]
