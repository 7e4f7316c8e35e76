"""The report of one or several runs: one self-contained HTML page, plots, the summary table
(markdown + CSV) and notes, in one directory.

``write_report`` is what ``edgebed report`` calls; it prints ``result.table_markdown``.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd

from . import breakdown, html, plots, tables, targets as tg
from .describe import class_of_device, class_order, class_table, live_devices, ordered, setup_table
from .groups import group_runs
from .metrics import class_shares
from .ps_link import plot_ps_link, ps_link_frame
from .run_page import run_page
from .. import numerics
from ..atomic import replacing
from ..algorithms import BASELINE
from ..rundir import read_json
from .runs import ReportError, Run, check_target, load_runs
from .sections import fidelity_tables, fidelity_text, wire_vs_payload

__all__ = ["ReportError", "ReportResult", "write_report", "choose_baseline", "default_out_dir"]


@dataclass(frozen=True)
class ReportResult:
    out_dir: Path
    markdown: Path                  # report.md: the tables, notes and the plots
    table_csv: Path                 # table.csv: one row per run, numbers (the study's runs.csv columns)
    plots: dict[str, Path]          # "accuracy_vs_updates" | "accuracy_vs_ingress" | ... | "timeline"
    table_markdown: str             # the summary table, to print
    baseline: Optional[str]         # name of the baseline run (None for a single run)
    runs: pd.DataFrame              # table.csv's rows (``targets.run_row`` + ingress ratios)
    targets: dict[float, pd.DataFrame] = field(default_factory=dict)   # per target: ``targets.target_table``
    window: int = 1                 # the moving average the targets read (1: the raw curve)
    notes: list[str] = field(default_factory=list)   # what the table can't say: no evals, incomplete, ...
    classes_csv: Optional[Path] = None               # per speed class shares, when a run has several
    html: Optional[Path] = None                      # report.html: everything above on one page
    target_csvs: dict[float, Path] = field(default_factory=dict)   # targets-<t>.csv

    @property
    def files(self) -> list[Path]:
        extra = [self.classes_csv] if self.classes_csv else []
        return [*([self.html] if self.html else []), self.markdown, self.table_csv,
                *self.target_csvs.values(), *extra, *self.plots.values()]

    def as_json(self) -> dict:
        """Every number of the CSVs (strict JSON: ``None`` where a CSV cell is empty), and the files."""
        return {"out_dir": str(self.out_dir), "files": [str(p) for p in self.files],
                "baseline": self.baseline, "targets": list(self.targets), "smoothing": self.window,
                "notes": self.notes, "runs": tables.records(self.runs),
                "to_target": {f"{100 * t:g}": tables.records(tt) for t, tt in self.targets.items()}}


def choose_baseline(runs: list[Run], baseline: Optional[str]) -> Run:
    """The run named ``baseline`` (dir name or path), else the first run of the baseline rule (ASGD,
    ``algorithms.BASELINE``), else the first run."""
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


def _notes(per_run: pd.DataFrame, targets: list[float], window: int) -> list[str]:
    notes = []
    if not targets:
        notes.append("no target accuracy: give --target (e.g. 0.9), or let the runs' evaluations choose one")
    for r in per_run.to_dict("records"):
        if r["evals"] == 0:
            notes.append(f"{r['run']}: no evaluations recorded, so no accuracy to show "
                         f"({r['updates']:,} updates applied)")
        else:
            missed = [t for t in targets if r[f"updates_to_{100 * t:g}"] is None
                      or pd.isna(r[f"updates_to_{100 * t:g}"])]
            if missed:
                best = r["smoothed_best"] if window > 1 else r["best_accuracy"]
                notes.append(f"{r['run']}: did not reach {', '.join(f'{100 * t:g} %' for t in missed)} "
                             f"(best{f' of the {window}-evaluation moving average' if window > 1 else ''} "
                             + (f"{100 * best:.2f} %)" if best == best else "—: fewer evaluations than the window)"))
        if r["status"] != "complete":
            notes.append(f"{r['run']}: status is {r['status']!r}; its numbers cover only what was recorded")
    return notes


def _markdown(runs: list[Run], table: str, notes: list[str], classes: str, plot_files: dict[str, Path],
              intro: list[str], target_md: list[tuple[str, str]], setup: list[tuple[str, str]]) -> str:
    lines = ["# edgebed report", "", *intro, "", "Runs:", *[f"- `{r.name}`: {r.path}" for r in runs], "", table]
    for heading, md in target_md:
        lines += [f"## {heading}", "", md]
    if notes:
        lines += ["Notes:", *[f"- {n}" for n in notes], ""]
    for heading, md in setup:
        lines += [f"## {heading}", "", md]
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


def resolve_targets(target, runs: list[Run], window: int) -> list[float]:
    """The targets a report reads: those given (one fraction or several, each checked), else
    ``targets.default_targets`` — the highest round accuracy every run reached."""
    if target is None or (not isinstance(target, (int, float)) and len(target) == 0):
        return tg.default_targets(runs, window)
    given = [target] if isinstance(target, (int, float)) else list(target)
    for t in given:
        check_target(t)
    return sorted(set(float(t) for t in given))


def check_window(window: int) -> int:
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ReportError(f"smoothing {window!r} must be a whole number of evaluations ≥ 1 (1: the raw "
                          "curve), e.g. --smooth 5")
    return window


def write_report(runs: list[Path], out: Optional[Path] = None, target=None,
                 baseline: Optional[str] = None, formats: tuple = (), window: int = 1) -> ReportResult:
    """Write report.html, plots (PNG and SVG), report.md, table.csv and targets-<t>.csv for ``runs``
    into ``out`` (see ``default_out_dir``).

    ``target``: a test accuracy fraction, several, or None for ``targets.default_targets``.
    ``window``: targets and plots read the trailing moving average over that many evaluations (as a
    study's ``smoothing``; 1 = the raw curve). Runs that differ only in seed form one group
    (``groups``), drawn as a mean with a min–max band and aggregated in the per-target tables, with
    the same code (``targets``) a study report uses. ``baseline`` names the run whose group others are
    compared with (default: the first ASGD run; one that is not among ``runs`` is an error);
    ``formats`` adds plot formats (``"pdf"``). Raises ReportError for a path that is not a readable
    run dir.
    """
    window = check_window(window)
    if isinstance(target, (int, float)):
        check_target(target)
    loaded = load_runs(list(runs))
    targets = resolve_targets(target, loaded, window)
    if baseline is not None:
        choose_baseline(loaded, baseline)   # a baseline that is not among the runs is an error
    groups = group_runs(loaded)
    base = choose_baseline(loaded, baseline) if len(groups) > 1 else None
    group_of = {r.name: g for g in groups for _, r in g.runs}
    base_group = group_of[base.name] if base else None
    baseline_of = {g.id: base_group.id if base_group else None for g in groups}
    per_run = pd.DataFrame([tg.run_row(g.id, g.label, seed, r, targets, window, paper=False)
                            for g in groups for seed, r in g.runs])
    per_run = tg.run_ratios(per_run, targets, baseline_of)
    per_run.insert(per_run.columns.get_loc("status"), "baseline", base_group.label if base_group else None)
    to_target = {t: tg.target_table(per_run, t, baseline_of) for t in targets}
    base_name = base.name if base else None

    out_dir = Path(out) if out is not None else default_out_dir(loaded)
    out_dir.mkdir(parents=True, exist_ok=True)

    orders = [class_order(r.scenario) for r in loaded]
    order = ordered([c for o in orders for c in o], orders)
    labels = _labels(loaded)
    curves = {g.label: [r.evals for _, r in g.runs] for g in groups}
    formats = tuple(dict.fromkeys(("svg", *formats)))   # the page embeds SVG; PNG is for report.md
    plot_files = {}
    smooth = f" ({window}-evaluation moving average)" if window > 1 else ""
    for kind, x, title, data in (
            ("accuracy_vs_updates", "update", "Test accuracy vs applied updates", curves),
            ("accuracy_vs_ingress", "ingress_bytes", "Test accuracy vs cumulative PS ingress", curves),
            ("accuracy_vs_virtual_time", "virtual_time", "Test accuracy vs virtual time", curves),
            ("accuracy_vs_wall_time", "wall_time", "Test accuracy vs wall time", plots.real_time_only(curves))):
        written = plots.plot_groups(data, x, "accuracy", out_dir / f"{kind}.png", title + smooth, targets,
                                    formats, window)
        if written:
            plot_files[kind] = written
    # one panel/bar group per group of seeds: its first run stands for it (named), staleness pools them
    reps = {(g.label if len(groups) > 1 else labels[g.runs[0][1].name])
            + (f" (seed {g.runs[0][0]})" if len(g.runs) > 1 else ""): g.runs[0][1] for g in groups}
    pooled = {(g.label if len(groups) > 1 else labels[g.runs[0][1].name])
              + (f" ({len(g.runs)} runs pooled)" if len(g.runs) > 1 else ""):
              pd.concat([r.updates for _, r in g.runs], ignore_index=True) for g in groups}
    lives = {label: _until_end(live_devices(_events(r), class_of_device(r.scenario), class_order(r.scenario)),
                                        per_run.loc[per_run["run"] == r.name, "updates"].iloc[0])
             for label, r in reps.items()}
    for kind, fn, data in (
            ("staleness", breakdown.staleness, pooled),
            ("classes", breakdown.classes, {label: class_shares(r.updates) for label, r in reps.items()
                                            if r.updates["speed_class"].nunique() > 1}),
            ("traffic", breakdown.traffic, {label: read_json(r.path, "traffic.json") for label, r in reps.items()}),
            ("timeline", breakdown.timeline, lives),
            ("ps_link", plot_ps_link, {label: ps_link_frame(_events(r)) for label, r in reps.items()})):
        written = fn(data, out_dir / f"{kind}.png", formats, order=order)
        if written:
            plot_files[kind] = written

    summary = tables.run_rows(per_run, targets, window, grouped=any(len(g.runs) > 1 for g in groups))
    table_md = tables.to_markdown(summary)
    table_csv = tables.write_csv(per_run, out_dir / "table.csv")
    target_csvs, target_md, target_frames = {}, [], []
    for t, tt in to_target.items():
        target_csvs[t] = tables.write_csv(tt, out_dir / f"targets-{100 * t:g}.csv")
        heading = f"To {100 * t:g} %" + (f" (moving average over {window} evaluations)" if window > 1 else "")
        shown = tg.display(tt, first="runs")
        target_md.append((heading, tables.to_markdown(shown)))
        target_frames.append((heading, shown))

    shares = {r.name: class_shares(r.updates) for r in loaded}
    classes_md, classes_csv = "", None
    if any(len(s) > 1 for s in shares.values()):
        shares = {k: _in_order(v, order) for k, v in shares.items() if not v.empty}
        classes_md = tables.to_markdown(tables.class_rows(shares))
        frames = [v.assign(run=k)[["run", *v.columns]] for k, v in shares.items()]
        classes_csv = tables.write_csv(pd.concat(frames, ignore_index=True), out_dir / "classes.csv")

    notes = _notes(per_run, targets, window)
    mix = numerics.summarize([numerics.of_run(r.path) for r in loaded])
    if mix["mixed"]:
        notes.append(f"numerics: {mix['text']}")
    if "accuracy_vs_updates" not in plot_files:
        notes.append("no run has evaluations, so no accuracy plots were drawn")
    intro = _intro(targets, window, target is None, groups, base_group)
    setup = [("Setup", setup_table([(g.label, [r for _, r in g.runs]) for g in groups]))]
    seen = set()
    for g in groups:   # the classes of each distinct setup
        k = json.dumps(g.runs[0][1].scenario.get("workers"), sort_keys=True, default=str)
        if k not in seen:
            seen.add(k)
            setup.append((f"Speed classes: {g.label}" if len(groups) > 1 else "Speed classes",
                          class_table(g.runs[0][1].scenario)))
    md_path = out_dir / "report.md"
    text = _markdown(loaded, table_md, notes, classes_md, plot_files, intro, target_md,
                     [(h, tables.to_markdown(f)) for h, f in setup])
    with replacing(md_path) as tmp:
        tmp.write_text(text)
    page = html.write(out_dir / "report.html", run_page(
        loaded, per_run, summary, intro, target_frames, setup, plot_files, notes,
        shares if classes_md else {}))
    return ReportResult(out_dir, md_path, table_csv, plot_files, table_md, base_name, per_run, to_target,
                        window, notes, classes_csv, page, target_csvs)


def _until_end(live: pd.DataFrame, updates: int) -> pd.DataFrame:
    """The timeline carried on to the run's last applied update (its last event may come earlier)."""
    if live.empty or live["update"].iloc[-1] >= updates:
        return live
    return pd.concat([live, live.iloc[[-1]].assign(update=updates, event="end")], ignore_index=True)


def _events(run: Run) -> pd.DataFrame:
    from .. import rundir
    return rundir.read_table(run.path, "events") if (run.path / "events").is_dir() else pd.DataFrame()


def _in_order(shares: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``class_shares`` rows in scenario order."""
    rank = {c: i for i, c in enumerate(ordered(shares["speed_class"], [order]))}
    return shares.sort_values("speed_class", key=lambda s: s.map(rank), kind="stable").reset_index(drop=True)


def _intro(targets: list[float], window: int, default: bool, groups, base_group) -> list[str]:
    t = ", ".join(f"{100 * x:g} %" for x in targets) or "none"
    lines = [f"Target accuracy: {t}" + (" (chosen: the highest round accuracy every run reached; "
                                        "give --target to choose)" if default and targets else "") + "."]
    if window > 1:
        lines.append(f"Targets and curves read the trailing moving average of test accuracy over {window} "
                     "evaluations (as a study with smoothing: " + str(window) + " does); 'best' is the "
                     "raw maximum unless named 'moving avg'.")
    if any(len(g.runs) > 1 for g in groups):
        lines.append("Runs that differ only in their seed form one group: plots draw its mean with a "
                     "min–max band, the 'to target' tables average the seeds that reached the target "
                     "and give [min–max].")
    if base_group is not None:
        lines.append(f"Ingress ratio = the baseline's mean PS ingress to the target / the runs' "
                     f"(baseline: {base_group.label}).")
    return lines
