"""The HTML page of a run report: what it shows and in which order (``html`` renders it).

Key numbers first, then the summary table, accuracy against updates / PS ingress / time, how the
updates break down (staleness, speed classes), the traffic, and the realized fidelity.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

from . import tables
from .html import Section, figure, render, table
from .metrics import RunSummary
from .runs import Run
from .sections import fidelity_tables, fidelity_text, wire_vs_payload
from ..units import fmt_bytes

CAPTIONS = {
    "accuracy_vs_updates": "Test accuracy against applied updates; a marker at every evaluation.",
    "accuracy_vs_ingress": "Test accuracy against cumulative PS ingress (payload bytes of every message "
                           "received, log scale): the cost edgebed measures.",
    "accuracy_vs_virtual_time": "Test accuracy against emulated time on the virtual clock.",
    "accuracy_vs_wall_time": "Test accuracy against wall-clock time since the run started.",
    "staleness": "How many updates the PS applied between a device's pull and its push (global τ).",
    "classes": "Share of the applied updates per speed class, and updates per device (its realized rate).",
    "traffic": "PS payload bytes in and out, by speed class and by wire message type (symmetric log scale).",
}


def _fig(plots: dict[str, Path], kind: str):
    path = plots[kind]
    svg = path.with_suffix(".svg")
    return figure(svg if svg.exists() else path, kind.replace("_", " "), CAPTIONS.get(kind, ""))


def _facts(run: Run, s: RunSummary) -> list[tuple[str, str]]:
    summ = run.summary
    pct = (lambda v: "—" if v != v else f"{100 * v:.2f} %")
    facts = [("status", s.status), ("final test accuracy", pct(s.final_accuracy)),
             ("best test accuracy", pct(s.best_accuracy)), ("applied updates", f"{s.updates:,}"),
             ("PS ingress", fmt_bytes(s.ingress_bytes))]
    if isinstance(summ.get("wall_time_s"), (int, float)):
        facts.append(("wall time", f"{summ['wall_time_s']:,.1f} s"))
    devices = summ.get("devices") or {}
    if devices:
        facts.append(("devices joined / crashed / lost",
                      f"{devices.get('said_hello', 0)} / {devices.get('crashed', 0)} / {devices.get('lost', 0)}"))
    return facts


def _describe(run: Run) -> str:
    sc = run.scenario
    algo, workers = sc.get("algorithm") or {}, sc.get("workers") or {}
    classes = workers.get("classes") or []
    return (f"{sc.get('name', run.name)}: {workers.get('n', '?')} devices in {len(classes) or 1} speed "
            f"class(es), {algo.get('name', '?')}, runtime {(sc.get('runtime') or {}).get('name', 'local')}"
            + (f" — {run.summary['reason']}" if run.summary.get("reason") else ""))


def run_page(runs: list[Run], summaries: list[RunSummary], ratios: dict, baseline: Optional[str],
             target: float, plots: dict[str, Path], notes: list[str],
             shares: dict[str, pd.DataFrame]) -> str:
    """The whole page as HTML text."""
    one = len(runs) == 1
    title = f"edgebed report: {runs[0].name}" if one else f"edgebed report: {len(runs)} runs"
    intro = [_describe(r) for r in runs]
    intro.append(f"Target accuracy {100 * target:g} %." + (
        f" Ingress ratio = baseline's ingress to target / the run's (baseline: {baseline})." if baseline else ""))
    sections = [Section("Summary", tables=[table(tables.summary_rows(summaries, ratios, baseline))])]
    acc = [k for k in ("accuracy_vs_updates", "accuracy_vs_ingress", "accuracy_vs_virtual_time",
                       "accuracy_vs_wall_time") if k in plots]
    if acc:
        sections.append(Section("Accuracy", figures=[_fig(plots, k) for k in acc]))
    updates = Section("Applied updates", figures=[_fig(plots, k) for k in ("staleness", "classes") if k in plots])
    if shares:
        updates.tables.append(table(tables.class_rows(shares)))
    if updates.figures or updates.tables:
        sections.append(updates)
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
    return render(title, sections, intro=intro, facts=_facts(runs[0], summaries[0]) if one else [],
                  notes=notes, subtitle=str(runs[0].path) if one else "")
