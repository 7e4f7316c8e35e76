"""Report of a study: per cell, mean and min/max over seeds — band plots, a table (markdown + CSV), one HTML page.

Reads what ``edgebed study run`` wrote (``status.json`` and the run dirs under ``runs/``); the
numbers of each run come from ``metrics.summarize``, so a study's table means what a run report's
table means. A cell's "to target" numbers average the seeds that reached the target and say how many
did; the ingress ratio is baseline cell's mean ingress to target / this cell's (``ingress_ratio``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from .. import numerics
from ..atomic import replacing
from ..units import plural
from ..analysis import plots, tables, targets as tg
from ..analysis.compact import load_any
from ..analysis.metrics import class_shares, ingress_ratio
from ..analysis.report import check_window
from ..analysis.runs import ReportError, Run, check_target


@dataclass(frozen=True)
class StudyReport:
    out_dir: Path
    markdown: Path          # report.md
    html: Path              # report.html, self-contained (plots embedded)
    table_csv: Path         # table.csv: one row per cell, numbers
    runs_csv: Path          # runs.csv: one row per cell × seed, numbers
    classes_csv: Optional[Path]
    plots: dict[str, Path]
    table_markdown: str
    cells: pd.DataFrame = None          # table.csv's rows
    runs: pd.DataFrame = None           # runs.csv's rows
    targets: dict = None                # target → its targets-<t>.csv rows
    target: Optional[float] = None      # the target of the cells table
    window: int = 1
    notes: tuple = ()

    def as_json(self) -> dict:
        """The numbers of every CSV (strict JSON: None where a CSV cell is empty), and the files."""
        return {"out_dir": str(self.out_dir), "files": [str(p) for p in self.files], "target": self.target,
                "targets": list(self.targets or {}), "smoothing": self.window, "notes": list(self.notes),
                "cells": tables.records(self.cells), "runs": tables.records(self.runs),
                "to_target": {f"{100 * t:g}": tables.records(tt) for t, tt in (self.targets or {}).items()},
                "classes": tables.records(pd.read_csv(self.classes_csv)) if self.classes_csv else []}

    @property
    def files(self) -> list[Path]:
        extra = [self.classes_csv] if self.classes_csv else []
        return [self.markdown, self.html, self.table_csv, self.runs_csv, *extra, *self.plots.values()]


def _load(study_dir: Path) -> tuple[dict, dict[str, list[tuple[int, Run]]], dict[str, str], list[str]]:
    """status.json, the loaded runs per cell id (in study order), labels by id, and notes."""
    status_path = study_dir / "status.json"
    if not status_path.is_file():
        raise ReportError(f"{study_dir}: no status.json; pass the directory `edgebed study run` made "
                          "(<out>/<study name>/), or run the study first")
    status = json.loads(status_path.read_text())
    runs: dict[str, list[tuple[int, Run]]] = {}
    labels: dict[str, str] = {}
    notes = []
    for e in status.get("cells", []):
        labels.setdefault(e["cell"], e["label"])
        runs.setdefault(e["cell"], [])
        if e["status"] not in ("complete", "skipped"):
            notes.append(f"{e['label']} · seed {e['seed']}: {e['status']}"
                         + (f" — {e['error']}" if e.get("error") else "") + "; left out of the table")
            continue
        runs[e["cell"]].append((e["seed"], load_any(study_dir / e["run"], f"{e['cell']}/seed-{e['seed']}")))
    return status, runs, labels, notes


def _stats(values: list[Optional[float]]) -> tuple[float, float, float, int]:
    """Mean, min, max over the values that exist, and how many exist."""
    v = [float(x) for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not v:
        return math.nan, math.nan, math.nan, 0
    return float(np.mean(v)), min(v), max(v), len(v)


def _pm(mean: float, lo: float, hi: float, fmt) -> str:
    if math.isnan(mean):
        return tables.DASH
    return fmt(mean) if lo == hi else f"{fmt(mean)} [{fmt(lo)}–{fmt(hi)}]"


def cell_table(runs: dict[str, list[tuple[int, Run]]], labels: dict[str, str], target: float,
               baseline_of: dict[str, Optional[str]], reference_of: Optional[dict[str, dict]] = None,
               targets: tuple[float, ...] = (), window: int = 1
               ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(display table, numbers per cell, numbers per run). Every "to target" number comes from
    ``analysis.targets`` on the ``window``-smoothed curve — the code ``edgebed report`` uses, so the
    same runs give the same numbers in both. ``baseline_of`` maps cell id → baseline id;
    ``reference_of`` cell id → published numbers (``final_accuracy``, ``ingress_ratio``), shown as
    ``reference …`` columns next to ours when any cell has them."""
    reference_of = {k: v for k, v in (reference_of or {}).items() if v}
    every = sorted(set(targets) | {target})
    per_run = [tg.run_row(cid, labels[cid], seed, r, every, window) for cid, seeded in runs.items()
               for seed, r in seeded]
    runs_df = pd.DataFrame(per_run)
    if not runs_df.empty:
        runs_df = tg.run_ratios(runs_df, every, baseline_of)
    tt = tg.target_table(runs_df, target, baseline_of) if not runs_df.empty else pd.DataFrame()
    hit = {r["cell"]: r for r in tt.to_dict("records")} if not tt.empty else {}
    cells = []
    for cid in runs:
        rows = [p for p in per_run if p["cell"] == cid]
        col = lambda k: [p[k] for p in rows]  # noqa: E731
        best, final = _stats(col("best_accuracy")), _stats(col("final_accuracy"))
        sbest = _stats(col("smoothed_best"))
        crashed = _stats(col("crashed"))
        h = hit.get(cid, {})
        cells.append({"cell": cid, "label": labels[cid], "seeds": len(rows),
                      "algorithm": rows[0]["algorithm"] if rows else "", "n": rows[0]["n"] if rows else 0,
                      "best_acc_mean": best[0], "best_acc_min": best[1], "best_acc_max": best[2],
                      "final_acc_mean": final[0], "final_acc_min": final[1], "final_acc_max": final[2],
                      "smoothed_best_mean": sbest[0], "smoothed_best_min": sbest[1],
                      "smoothed_best_max": sbest[2],
                      "tau_mean": _stats(col("tau_mean"))[0], "sigma_mean": _stats(col("sigma_mean"))[0],
                      "reached_target": int(h.get("reached", 0)),
                      "updates_to_target_mean": h.get("updates_mean", math.nan),
                      "updates_to_target_min": h.get("updates_min", math.nan),
                      "updates_to_target_max": h.get("updates_max", math.nan),
                      "ingress_to_target_mean": h.get("ingress_mean", math.nan),
                      "ingress_to_target_min": h.get("ingress_min", math.nan),
                      "ingress_to_target_max": h.get("ingress_max", math.nan),
                      "ingress_mean": _stats(col("ingress_bytes"))[0],
                      "egress_per_update_mean": _stats([p["egress_bytes"] / p["updates"]
                                                        if p["egress_bytes"] and p["updates"] else None
                                                        for p in rows])[0],
                      "crashed_mean": crashed[0], "crashed_min": crashed[1], "crashed_max": crashed[2]})
    num = pd.DataFrame(cells)
    by_id = {c["cell"]: c for c in cells}
    ratios = []
    for c in cells:
        b = by_id.get(baseline_of.get(c["cell"]) or "")
        nan = lambda x: None if x is None or math.isnan(x) else x  # noqa: E731
        ratios.append(math.nan if b is None else
                      ingress_ratio(nan(b["ingress_to_target_mean"]), nan(c["ingress_to_target_mean"])))
    if not num.empty:
        num["target"] = target
        num["smoothing"] = window
        num["baseline"] = [baseline_of.get(c["cell"]) for c in cells]
        num["ingress_ratio_vs_baseline"] = [round(x, 2) for x in ratios]
        if reference_of:
            for key in ("final_accuracy", "ingress_ratio"):
                num[f"reference_{key}"] = [reference_of.get(c["cell"], {}).get(key) for c in cells]
    show_crash = any(not math.isnan(c["crashed_mean"]) and c["crashed_max"] > 0 for c in cells)
    # PS → device bytes per applied update (its pulls): shown when cells differ in it, e.g. compressed pulls
    egress = [c["egress_per_update_mean"] for c in cells if not math.isnan(c["egress_per_update_mean"])]
    show_egress = bool(egress) and max(egress) > 1.05 * min(egress)
    t = f"{100 * target:g} %" + (f" ({window}-eval moving avg)" if window > 1 else "")
    rows = []
    for c, ratio in zip(cells, ratios):
        seeds = c["seeds"]
        reached = f" ({c['reached_target']}/{seeds} seeds)" if 0 < c["reached_target"] < seeds else ""
        missed = "not reached" if seeds else "no runs"
        row = {"cell": c["label"], "seeds": str(seeds),
               "best acc (%)": _pm(c["best_acc_mean"], c["best_acc_min"], c["best_acc_max"], tables.pct),
               "final acc (%)": _pm(c["final_acc_mean"], c["final_acc_min"], c["final_acc_max"], tables.pct),
               **({f"best of {window}-eval moving avg (%)": _pm(
                   c["smoothed_best_mean"], c["smoothed_best_min"], c["smoothed_best_max"], tables.pct)}
                  if window > 1 else {}),
               f"updates to {t}": (missed if c["reached_target"] == 0 else _pm(
                   c["updates_to_target_mean"], c["updates_to_target_min"], c["updates_to_target_max"],
                   lambda v: f"{v:,.0f}") + reached),
               f"ingress to {t} (MB)": (missed if c["reached_target"] == 0 else _pm(
                   c["ingress_to_target_mean"], c["ingress_to_target_min"], c["ingress_to_target_max"],
                   tables.mb) + reached),
               "ingress ratio": ("baseline" if baseline_of.get(c["cell"]) == c["cell"]
                                 else tables.times(ratio))}
        if reference_of:
            ref = reference_of.get(c["cell"], {})
            row["reference final acc (%)"] = tables.pct(ref.get("final_accuracy") or math.nan)
            row["reference ingress ratio"] = tables.times(ref.get("ingress_ratio") or math.nan)
        if show_egress:
            row["egress kB / update (pulls)"] = (f"{c['egress_per_update_mean'] / 1e3:,.1f}"
                                                 if not math.isnan(c["egress_per_update_mean"]) else "—")
        if show_crash:
            row["crashed"] = _pm(c["crashed_mean"], c["crashed_min"], c["crashed_max"],
                                 lambda v: f"{v:,.1f}".removesuffix(".0"))
        rows.append(row)
    return pd.DataFrame(rows), num, runs_df


def _classes(runs: dict[str, list[tuple[int, Run]]], labels: dict[str, str]) -> pd.DataFrame:
    """Per cell and speed class: share of applied updates and realized rate ratio, mean over seeds."""
    frames = []
    for cid, seeded in runs.items():
        for seed, r in seeded:
            comp = r.summary.get("compact")
            s = pd.DataFrame(comp["classes"]) if comp is not None and r.updates.empty else class_shares(r.updates)
            crashes = r.summary.get("crashes") or {}   # failures.crash: intended and realised, per class
            if len(s) > 1:
                frames.append(s.assign(cell=labels[cid], seed=seed,
                                       crash_intended=s["speed_class"].map(crashes.get("intended") or {}),
                                       crash_realised=s["speed_class"].map(crashes.get("realised") or {})))
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    g = df.groupby(["cell", "speed_class"], sort=False)
    out = g.agg(seeds=("seed", "nunique"), devices=("devices", "mean"), updates=("updates", "mean"),
                share_mean=("share", "mean"), share_min=("share", "min"), share_max=("share", "max"),
                rate_ratio_mean=("rate_ratio", "mean"), rate_ratio_min=("rate_ratio", "min"),
                rate_ratio_max=("rate_ratio", "max"), crash_intended=("crash_intended", "mean"),
                crash_realised=("crash_realised", "mean")).reset_index()
    order = {labels[cid]: i for i, cid in enumerate(runs)}   # the cells table's order (the study's)
    return out.sort_values(["cell", "rate_ratio_mean"], ascending=[True, False], kind="stable",
                           key=lambda col: col.map(order) if col.name == "cell" else col)


def _class_display(df: pd.DataFrame) -> pd.DataFrame:
    crashes = df["crash_realised"].notna().any()   # runs whose summary says intended → realised crashes
    num = (lambda v: "?" if v != v else f"{v:g}")  # noqa: E731 — mean over seeds; ? where none stated
    return pd.DataFrame([{
        "cell": r.cell, "speed class": r.speed_class, "devices": f"{r.devices:g}",
        "updates": f"{r.updates:,.0f}",
        "share (%)": _pm(100 * r.share_mean, 100 * r.share_min, 100 * r.share_max, lambda v: f"{v:.1f}"),
        "rate ratio": _pm(r.rate_ratio_mean, r.rate_ratio_min, r.rate_ratio_max, tables.times),
        **({"crashes intended → realised (mean over seeds)": f"{num(r.crash_intended)} → {num(r.crash_realised)}"}
           if crashes else {}),
    } for r in df.itertuples()])


def _alpha_table(dirs: list[Path], statuses: list[dict]) -> pd.DataFrame:
    """The α each cell ran at, for studies tuned by ``study tune`` (their status.json names it), with
    the grid it was chosen from; a choice at the grid's edge is flagged — the best α may lie beyond."""
    import yaml
    rows = []
    for d, st in zip(dirs, statuses):
        tuned = st.get("tuned") or {}
        if not tuned:
            continue
        try:
            spec = yaml.safe_load((d / "study.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            spec = {}
        grid = sorted(float(x) for x in ((spec.get("tuning") or {}).get("lr") or []))
        tag = f"{st.get('protocol') or st.get('study', d.name)}: " if len(dirs) > 1 else ""
        for label, lr in tuned.items():
            edge = bool(grid) and float(lr) in (grid[0], grid[-1])
            rows.append({"cell": tag + label, "α": f"{float(lr):g}",
                         "grid": " · ".join(f"{g:g}" for g in grid) if grid else "—",
                         "note": "at the grid's edge: the best α may lie beyond it" if edge else ""})
    return pd.DataFrame(rows)


def _html(title: str, intro: list[str], sections: list[tuple[str, pd.DataFrame]], notes: list[str],
          pngs: dict[str, Path]) -> str:
    """The study page, in the page shell every edgebed report shares (analysis/html.py)."""
    from ..analysis.html import Section, figure, render, table
    secs = [Section(heading, tables=[table(frame)]) for heading, frame in sections]
    if pngs:
        secs.append(Section("Plots", figures=[figure(p, kind.replace("_", " ")) for kind, p in pngs.items()]))
    return render(title, secs, intro=intro, notes=notes)


def _write(path: Path, text: str) -> Path:
    with replacing(path) as tmp:
        tmp.write_text(text)
    return path


def _combine(dirs: list[Path]) -> tuple[dict, dict, dict, list[str], dict, dict]:
    """Several study (or results) directories as one: with more than one, cell ids are prefixed by
    the directory's position and labels by its protocol (or study name), so two protocols of the
    same cells sit side by side. Returns (first status, runs, labels, notes, baseline_of, reference_of)."""
    runs, labels, notes, baseline_of, reference_of = {}, {}, [], {}, {}
    first = None
    for i, d in enumerate(dirs):
        status, r, lab, nt = _load(d)
        first = first or status
        many = len(dirs) > 1
        pre = f"{i}:" if many else ""
        tag = f"{status.get('protocol') or status.get('study', d.name)}: " if many else ""
        for cid, seeded in r.items():
            runs[pre + cid] = seeded
            labels[pre + cid] = tag + lab[cid]
        notes += [tag + n for n in nt]
        for e in status.get("cells", []):
            baseline_of[pre + e["cell"]] = pre + e["baseline"] if e.get("baseline") else None
            reference_of[pre + e["cell"]] = e.get("reference")
    return first, runs, labels, notes, baseline_of, reference_of


def write_study_report(study_dir: str | Path | list, out: Optional[Path] = None,
                       target=None, window: Optional[int] = None) -> StudyReport:
    """Aggregate a study directory — or a committed results directory, or several of either side by
    side (e.g. two protocols) — into ``out`` (default ``<first dir>/report``). ``target`` (a test
    accuracy fraction, or several) replaces the study's own targets; the cells table reads the
    highest. ``window`` replaces the study's ``smoothing`` (moving average over that many
    evaluations, which every 'to target' number reads)."""
    dirs = [Path(d) for d in (study_dir if isinstance(study_dir, (list, tuple)) else [study_dir])]
    given = [] if target is None else [target] if isinstance(target, (int, float)) else list(target)
    for t in given:
        check_target(t)
    status, runs, labels, notes, baseline_of, reference_of = _combine(dirs)
    window = check_window(int(window if window is not None else status.get("smoothing") or 1))
    if given:
        targets = tuple(sorted(set(float(t) for t in given)))
        target = targets[-1]
    else:
        target = float(status.get("target") or 0.97)
        targets = tuple(sorted(set(status.get("targets") or []) | {target}))
    out_dir = Path(out) if out is not None else dirs[0] / "report"
    out_dir.mkdir(parents=True, exist_ok=True)

    display, numbers, per_run = cell_table(runs, labels, target, baseline_of, reference_of, targets, window)
    table_md = tables.to_markdown(display)
    table_csv = tables.write_csv(numbers, out_dir / "table.csv")
    runs_csv = tables.write_csv(per_run, out_dir / "runs.csv")
    classes = _classes(runs, labels)
    classes_csv = tables.write_csv(classes, out_dir / "classes.csv") if not classes.empty else None
    target_sections, target_frames = [], {}
    for t in targets:
        tt = tg.target_table(per_run, t, baseline_of) if not per_run.empty else pd.DataFrame()
        target_frames[t] = tt
        if not tt.empty:
            tables.write_csv(tt, out_dir / f"targets-{t * 100:g}.csv")
            target_sections.append((f"To {100 * t:g} % (moving average over {plural(window, 'evaluation')})",
                                    tg.display(tt)))

    groups = {labels[cid]: [r.evals for _, r in seeded] for cid, seeded in runs.items() if seeded}
    notes += plots.coincidence_notes(groups)
    pngs = {}
    for x, kind, title in (("update", "accuracy_vs_updates", "Test accuracy vs applied updates"),
                           ("ingress_bytes", "accuracy_vs_ingress", "Test accuracy vs cumulative PS ingress"),
                           ("virtual_time", "accuracy_vs_virtual_time", "Test accuracy vs virtual time")):
        p = plots.plot_band(groups, x, "accuracy", out_dir / f"{kind}.png",
                            title, target, window=window)
        if p:
            pngs[kind] = p

    statuses = [json.loads((d / "status.json").read_text()) for d in dirs]
    name = " vs ".join(dict.fromkeys(st.get("study", d.name) for st, d in zip(statuses, dirs)))
    done = sum(len(v) for v in runs.values())
    total = sum(int(st.get("total") or 0) for st in statuses) if len(dirs) > 1 else status.get("total", "?")
    intro = [f"{done} of {total} runs (cell × seed) complete. Target accuracy "
             f"{100 * target:g} %. Cells show the mean over seeds and [min–max]; 'to target' numbers "
             "average the seeds that reached it" + (f", on the trailing moving average over {window} "
                                                    "evaluations (plots too)" if window > 1 else "")
             + ". The same code as `edgebed report --smooth " + str(window) + "` on these runs."]
    if status.get("protocol") and len(dirs) == 1:
        intro.append(f"Protocol: {status['protocol']}.")
    intro.append("Numerics: " + numerics.summarize([numerics.of_run(r.path) for v in runs.values() for _, r in v])["text"] + ".")
    if window > 1:
        intro.append(f"Targets read the moving average of test accuracy over {window} "
                     "evaluations (trailing): the first evaluation where it reaches the target; the "
                     "'best of moving avg' column is its maximum, the paper's 'final accuracy'. Bytes: our wire "
                     "bytes (all PS ingress) and the paper's encoding (pushes pickled as Python lists, "
                     "edgebed/analysis/paper_bytes.py).")
    if status.get("baseline"):
        intro.append(f"Ingress ratio = baseline cell's mean ingress to target / the cell's "
                     f"(baseline: {status['baseline']}).")
    if any(reference_of.values()):
        intro.append("Reference columns: published numbers, not ours"
                     + (f" — {status['reference_source']}." if status.get("reference_source") else "."))
    if status.get("description") and len(dirs) == 1:
        intro.append(status["description"].strip())
    alphas = _alpha_table(dirs, statuses)
    tables_of = ", ".join(dict.fromkeys(f"{Path(st['file']).stem}.tuning.csv" for st in statuses
                                        if st.get("tuned") and st.get("file")))
    alpha_heading = ("α per cell, chosen by edgebed study tune on a validation split"
                     + (f" (the whole table: {tables_of})" if tables_of else ""))
    sections = [("Cells", display), *target_sections]
    if not classes.empty:
        sections.append(("Applied updates per speed class", _class_display(classes)))
    if not alphas.empty:
        sections.append((alpha_heading, alphas))
    md = [f"# Study {name}", "", *intro, "", table_md]
    for heading, frame in target_sections:
        md += [f"## {heading}", "", tables.to_markdown(frame)]
    if not classes.empty:
        md += ["## Applied updates per speed class", "", tables.to_markdown(_class_display(classes))]
    if not alphas.empty:
        md += [f"## {alpha_heading}", "", tables.to_markdown(alphas)]
    if notes:
        md += ["Notes:", *[f"- {n}" for n in notes], ""]
    md += [f"![{k.replace('_', ' ')}]({p.name})\n" for k, p in pngs.items()]
    md_path = _write(out_dir / "report.md", "\n".join(md))
    html_path = _write(out_dir / "report.html", _html(f"Study {name}", intro, sections, notes, pngs))
    return StudyReport(out_dir, md_path, html_path, table_csv, runs_csv, classes_csv, pngs, table_md,
                       numbers, per_run, target_frames, target, window, tuple(notes))
