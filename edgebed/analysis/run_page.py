"""The HTML page of a run report: what it shows and in which order (``html`` renders it).

Key numbers first, then the summary table, the per-target tables, accuracy against updates / PS
ingress / time, the setup (per run and per speed class), how the updates break down (staleness,
speed classes), live devices and crashes, the traffic, and the realized fidelity.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from . import tables
from .html import Section, figure, render, table
from .runs import Run
from .sections import fidelity_tables, fidelity_text, wire_vs_payload
from ..units import fmt_bytes

CAPTIONS = {
    "accuracy_vs_updates": "Test accuracy against applied updates; a marker at every evaluation.",
    "accuracy_vs_ingress": "Test accuracy against cumulative PS ingress (payload bytes of every message "
                           "received, log scale): the cost edgebed measures.",
    "accuracy_vs_virtual_time": "Test accuracy against emulated time on the virtual clock.",
    "accuracy_vs_wall_time": "Test accuracy against wall-clock time since the run started.",
    "staleness": "How many updates the PS applied between a device's pull and its push (global τ), per "
                 "speed class; dotted lines mark each class's median.",
    "timeline": "Devices alive (said hello, not yet crashed, lost or exited) against applied updates; "
                "a cross marks each crash, a triangle each device found lost.",
    "classes": "Share of the applied updates per speed class, and updates per device (its realized rate).",
    "traffic": "PS payload bytes in and out, by speed class and by wire message type (symmetric log scale).",
}


def _fig(plots: dict[str, Path], kind: str):
    path = plots[kind]
    svg = path.with_suffix(".svg")
    return figure(svg if svg.exists() else path, kind.replace("_", " "), CAPTIONS.get(kind, ""))


def _facts(run: Run, r: dict, targets: list[str]) -> list[tuple[str, str]]:
    summ = run.summary
    pct = (lambda v: "—" if v is None or v != v else f"{100 * v:.2f} %")
    facts = [("status", str(r["status"])), ("final test accuracy", pct(r["final_accuracy"])),
             ("best test accuracy", pct(r["best_accuracy"])), ("applied updates", f"{r['updates']:,}"),
             ("PS ingress", fmt_bytes(r["ingress_bytes"]))]
    for t in targets:
        u = r.get(f"updates_to_{t}")
        facts.append((f"updates to {t} %", "not reached" if u is None or u != u else f"{int(u):,}"))
    if isinstance(summ.get("wall_time_s"), (int, float)):
        facts.append(("wall time", f"{summ['wall_time_s']:,.1f} s"))
    devices = summ.get("devices") or {}
    if devices:
        facts.append(("devices joined / crashed / lost",
                      f"{devices.get('said_hello', 0)} / {devices.get('crashed', 0)} / {devices.get('lost', 0)}"))
    crashes = summ.get("crashes") or {}
    if crashes.get("realised") is not None:
        facts.append(("crashes intended → realised, per class", crash_text(crashes)))
    return facts


def crash_text(crashes: dict) -> str:
    """summary.json's ``crashes`` as ``fast 1 → 1 · slow 1 → 0`` (intended → realised devices per
    class; ``? →`` where the probability form stated no number)."""
    intended = crashes.get("intended")
    return " · ".join(f"{cls} {'?' if intended is None else intended.get(cls, 0)} → {n}"
                      for cls, n in crashes["realised"].items())


def _describe(run: Run) -> str:
    sc = run.scenario
    algo, workers = run.algorithm_params, sc.get("workers") or {}
    classes = workers.get("classes") or []
    return (f"{sc.get('name', run.name)}: {workers.get('n', '?')} devices in {len(classes) or 1} speed "
            f"class(es), {algo.get('name', '?')}, runtime {(sc.get('runtime') or {}).get('name', 'local')}"
            + (f" — {run.summary['reason']}" if run.summary.get("reason") else ""))


def run_page(runs: list[Run], per_run: pd.DataFrame, summary: pd.DataFrame, intro: list[str],
             to_target: list[tuple[str, pd.DataFrame]], setup: list[tuple[str, pd.DataFrame]],
             plots: dict[str, Path], notes: list[str], shares: dict[str, pd.DataFrame]) -> str:
    """The whole page as HTML text."""
    one = len(runs) == 1
    title = f"edgebed report: {runs[0].name}" if one else f"edgebed report: {len(runs)} runs"
    described = [_describe(r) for r in runs]
    intro = list(dict.fromkeys(re.sub(r"^(\S*?)-s\d+:", r"\1:", d) for d in described)) + list(intro)
    sections = [Section("Summary", tables=[table(summary)])]
    for heading, frame in to_target:
        sections.append(Section(heading, tables=[table(frame)]))
    acc = [k for k in ("accuracy_vs_updates", "accuracy_vs_ingress", "accuracy_vs_virtual_time",
                       "accuracy_vs_wall_time") if k in plots]
    if acc:
        sections.append(Section("Accuracy", figures=[_fig(plots, k) for k in acc]))
    sections.append(Section("Setup", tables=[table(f, h if h != "Setup" else "") for h, f in setup]))
    updates = Section("Applied updates", figures=[_fig(plots, k) for k in ("staleness", "classes") if k in plots])
    if shares:
        updates.tables.append(table(tables.class_rows(shares)))
    if updates.figures or updates.tables:
        sections.append(updates)
    if "timeline" in plots:
        sections.append(Section("Devices", figures=[_fig(plots, "timeline")]))
    traffic = Section("PS traffic", figures=[_fig(plots, "traffic")] if "traffic" in plots else [])
    for r in runs:
        wire = wire_vs_payload(r)
        if wire is not None:
            traffic.tables.append(table(wire, f"PS payload vs on-the-wire bytes counted by the kernel: {r.name}"))
    if traffic.figures or traffic.tables:
        sections.append(traffic)
    for r in runs:
        parts, text = fidelity_tables(r), fidelity_text(r)
        if parts or text:
            sections.append(Section(f"Realized fidelity: {r.name}" if not one else "Realized fidelity",
                                    text=text, tables=[table(f, c) for c, f in parts]))
    targets = [c.removeprefix("updates_to_") for c in per_run.columns if c.startswith("updates_to_")]
    return render(title, sections, intro=intro,
                  facts=_facts(runs[0], per_run.iloc[0].to_dict(), targets) if one else [],
                  notes=notes, subtitle=str(runs[0].path) if one else "")
