"""The report of one or several runs: one self-contained HTML page, plots, the summary table
(markdown + CSV) and notes, in one directory.

``write_report`` is what ``edgebed report`` calls; it prints ``result.table_markdown``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd

from . import breakdown, html, plots, tables
from .run_page import run_page
from .metrics import RunSummary, class_shares, ratios_vs, summarize
from .. import numerics
from ..ps.rules import BASELINE
from ..rundir import read_json
from .runs import ReportError, Run, check_target, load_runs
from .sections import fidelity_tables, fidelity_text, wire_vs_payload

__all__ = ["ReportError", "ReportResult", "write_report", "choose_baseline", "default_out_dir"]


@dataclass(frozen=True)
class ReportResult:
    out_dir: Path
    markdown: Path                  # report.md: the table, notes, class shares and the plots
    table_csv: Path                 # table.csv: the summary table as numbers
    plots: dict[str, Path]          # "accuracy_vs_updates" | "accuracy_vs_ingress" | "accuracy_vs_virtual_time"
    table_markdown: str             # the summary table, to print
    baseline: Optional[str]         # name of the baseline run (None for a single run)
    summaries: list[RunSummary]
    notes: list[str] = field(default_factory=list)   # what the table can't say: no evals, incomplete, ...
    classes_csv: Optional[Path] = None               # per speed class shares, when a run has several
    html: Optional[Path] = None                      # report.html: everything above on one page

    @property
    def files(self) -> list[Path]:
        extra = [self.classes_csv] if self.classes_csv else []
        return [*([self.html] if self.html else []), self.markdown, self.table_csv, *extra, *self.plots.values()]


def choose_baseline(runs: list[Run], baseline: Optional[str]) -> Run:
    """The run named ``baseline`` (dir name or path), else the first run of the baseline rule (ASGD,
    ``rules.BASELINE``), else the first run."""
    if baseline is None:
        return next((r for r in runs if r.algorithm == BASELINE), runs[0])
    wanted = Path(baseline)
    for r in runs:
        if baseline in (r.name, r.path.name) or (wanted.exists() and wanted.resolve() == r.path.resolve()):
            return r
    names = ", ".join(r.name for r in runs)
    raise ReportError(f"baseline {baseline!r} is not one of the runs given ({names}); pass one of "
                      f"those names, or leave --baseline out to use the first {BASELINE} run")


def default_out_dir(runs: list[Run], now: Optional[float] = None) -> Path:
    """``<run>/report/`` for one run; ``reports/compare-<timestamp>/`` beside the runs' folder otherwise."""
    if len(runs) == 1:
        return runs[0].path / "report"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    base = runs[0].path.resolve().parent.parent / "reports" / f"compare-{stamp}"
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    return path


def _labels(runs: list[Run]) -> dict[str, str]:
    """Legend label per run name: scenario + algorithm, or the run name where those collide."""
    labels = [r.label for r in runs]
    return {r.name: (r.label if labels.count(r.label) == 1 else r.name) for r in runs}


def _notes(summaries: list[RunSummary], target: float) -> list[str]:
    notes = []
    for s in summaries:
        if s.evals == 0:
            notes.append(f"{s.run}: no evaluations recorded, so no accuracy to show "
                         f"({s.updates:,} updates applied)")
        elif s.updates_to_target is None:
            notes.append(f"{s.run}: did not reach {100 * target:g} % (best {100 * s.best_accuracy:.2f} %)")
        if s.status != "complete":
            notes.append(f"{s.run}: status is {s.status!r}; its numbers cover only what was recorded")
    return notes


def _markdown(runs: list[Run], table: str, notes: list[str], classes: str,
              plot_files: dict[str, Path], target: float, baseline: Optional[str]) -> str:
    lines = ["# edgebed report", "", f"Target accuracy: {100 * target:g} %."]
    if baseline:
        lines.append(f"Ingress ratio = baseline's ingress to target / the run's (baseline: {baseline}).")
    lines += ["", "Runs:", *[f"- `{r.name}`: {r.path}" for r in runs], "", table]
    if notes:
        lines += ["Notes:", *[f"- {n}" for n in notes], ""]
    if classes:
        lines += ["## Applied updates per speed class", "", classes]
    for r in runs:
        wire = wire_vs_payload(r)
        if wire is not None:
            lines += [f"## PS payload vs on-the-wire bytes (kernel counters): `{r.name}`", "",
                      tables.to_markdown(html.human(wire)), ""]
    for r in runs:
        lines += _fidelity_lines(r)
    for kind, p in plot_files.items():
        lines += [f"![{kind.replace('_', ' ')}]({p.name})", ""]
    return "\n".join(lines)


def _fidelity_lines(run: Run) -> list[str]:
    parts, text = fidelity_tables(run), fidelity_text(run)
    if not parts and not text:
        return []
    lines = [f"## Realized fidelity: `{run.name}`", ""]
    for caption, frame in parts:
        lines += [caption, "", tables.to_markdown(html.human(frame)), ""]
    return lines + [t for t in text for t in (t, "")]


def write_report(runs: list[Path], out: Optional[Path] = None, target: float = 0.97,
                 baseline: Optional[str] = None, formats: tuple = ()) -> ReportResult:
    """Write report.html, plots (PNG and SVG), report.md and table.csv for ``runs`` into ``out``
    (see ``default_out_dir``).

    ``target`` is a test accuracy fraction; ``baseline`` names the run others are compared with
    (only used with several runs; one that is not among ``runs`` is an error); ``formats`` adds
    plot formats (``"pdf"``). Raises ReportError for a path that is not a readable run dir.
    """
    check_target(target)
    loaded = load_runs(list(runs))
    if baseline is not None:
        choose_baseline(loaded, baseline)   # a baseline that is not among the runs is an error
    base = choose_baseline(loaded, baseline) if len(loaded) > 1 else None
    summaries = [summarize(r.name, r.scenario, r.summary, r.updates, r.evals, target) for r in loaded]
    by_name = {s.run: s for s in summaries}
    ratios = ratios_vs(by_name[base.name], summaries) if base else {}
    base_name = base.name if base else None

    out_dir = Path(out) if out is not None else default_out_dir(loaded)
    out_dir.mkdir(parents=True, exist_ok=True)

    labels = _labels(loaded)
    curves = {labels[r.name]: r.evals for r in loaded}
    formats = tuple(dict.fromkeys(("svg", *formats)))   # the page embeds SVG; PNG is for report.md
    plot_files = {}
    for kind, fn in (("accuracy_vs_updates", plots.accuracy_vs_updates),
                     ("accuracy_vs_ingress", plots.accuracy_vs_ingress),
                     ("accuracy_vs_virtual_time", plots.accuracy_vs_virtual_time),
                     ("accuracy_vs_wall_time", plots.accuracy_vs_wall_time)):
        written = fn(curves, out_dir / f"{kind}.png", target, formats)
        if written:
            plot_files[kind] = written
    for kind, fn, data in (
            ("staleness", breakdown.staleness, {labels[r.name]: r.updates for r in loaded}),
            ("classes", breakdown.classes, {labels[r.name]: class_shares(r.updates) for r in loaded
                                            if r.updates["speed_class"].nunique() > 1}),
            ("traffic", breakdown.traffic, {labels[r.name]: read_json(r.path, "traffic.json") for r in loaded})):
        written = fn(data, out_dir / f"{kind}.png", formats)
        if written:
            plot_files[kind] = written

    table_md = tables.to_markdown(tables.summary_rows(summaries, ratios, base_name))
    table_csv = tables.write_csv(tables.summary_numbers(summaries, ratios, base_name), out_dir / "table.csv")

    shares = {r.name: class_shares(r.updates) for r in loaded}
    classes_md, classes_csv = "", None
    if any(len(s) > 1 for s in shares.values()):
        shares = {k: v for k, v in shares.items() if not v.empty}
        classes_md = tables.to_markdown(tables.class_rows(shares))
        frames = [v.assign(run=k)[["run", *v.columns]] for k, v in shares.items()]
        classes_csv = tables.write_csv(pd.concat(frames, ignore_index=True), out_dir / "classes.csv")

    notes = _notes(summaries, target)
    mix = numerics.summarize([numerics.of_run(r.path) for r in loaded])
    if mix["mixed"]:
        notes.append(f"numerics: {mix['text']}")
    if "accuracy_vs_updates" not in plot_files:
        notes.append("no run has evaluations, so no accuracy plots were drawn")
    md_path = out_dir / "report.md"
    text = _markdown(loaded, table_md, notes, classes_md, plot_files, target, base_name)
    tmp = md_path.with_name(".report.md.tmp")
    tmp.write_text(text)
    tmp.replace(md_path)
    page = html.write(out_dir / "report.html", run_page(
        loaded, summaries, ratios, base_name, target, plot_files, notes, shares if classes_md else {}))
    return ReportResult(out_dir, md_path, table_csv, plot_files, table_md, base_name, summaries,
                        notes, classes_csv, page)
