"""Committed study results: compact each finished run into a results directory, import old runs.

A results directory (``benchmarks/results/studies/<study>/``) has a study directory's layout with
compact results (``analysis/compact.py``) instead of run dirs, plus its own ``status.json``, so
``edgebed study report`` and the resume check work from it after the run dirs are gone.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .. import numerics
from ..rundir import read_json, write_json_atomic
from .spec import Study
from .storage import cell_dir, compact_done, complete_run, done_run, results_dir, status_entry


def _compact(run: Path, dest: Path) -> None:
    from ..analysis.compact import write_compact
    write_compact(run, dest)


def write_results_status(study: Study, results: Path) -> dict:
    """``<results>/status.json``: every cell × seed of the study, complete where a compact result of
    the same resolved scenario is there (so ``study report <results>`` reports exactly those)."""
    results.mkdir(parents=True, exist_ok=True)
    cells = []
    for cell in study.cells:
        for seed in study.spec.seed_list:
            done = compact_done(results, cell, seed, study.scenario(cell, seed))
            cells.append(status_entry(study, cell, seed, status="complete" if done else "not run",
                                run=str(done.relative_to(results)) if done else None))
    status = {"study": study.spec.name, "file": str(study.path), "description": study.spec.description,
              "target": study.spec.target, "targets": study.spec.targets,
              "smoothing": study.spec.smoothing, "protocol": study.spec.protocol,
              "baseline": study.spec.baseline, "reference_source": study.spec.reference_source,
              "tuned": study.tuned, "total": len(cells),
              "complete": sum(e["status"] == "complete" for e in cells),
              "not run": sum(e["status"] == "not run" for e in cells),
              "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cells": cells}
    write_json_atomic(results / "status.json", status)
    (results / "study.yaml").write_text(study.path.read_text())
    return status


def export_new(study: Study, sdir: Path, results: Path, entries: list[dict], exported: set,
               show: Callable[[str, bool], None]) -> None:
    """Compact the complete runs among ``entries`` (status.json entries) not yet exported."""
    by_id = {c.id: c for c in study.cells}
    changed = False
    for e in entries:
        key = (e["cell"], e["seed"])
        if key in exported or e["status"] not in ("complete", "skipped") or not e.get("run"):
            continue
        run = Path(e["run"]) if Path(e["run"]).is_absolute() else sdir / e["run"]
        dest = results_dir(results, by_id[e["cell"]], e["seed"])
        if run.resolve() != dest.resolve():
            _compact(run, dest)
            show(f"{e['label']} · seed {e['seed']}: compact result in {dest}", True)
            changed = True
        exported.add(key)
    if changed or not (results / "status.json").is_file():
        write_results_status(study, results)


def import_runs(study: Study, source: Path, results: Path,
                show: Callable[[str, bool], None] = lambda line, final: None) -> dict:
    """Compact every cell × seed of ``study`` whose latest run under ``source`` is complete and of the
    same resolved scenario; runs of another scenario are named, not taken.

    ``source`` is a study directory (run directories) or a committed results directory (compact
    results, copied as they are), of this study or of another one with cells of the same id: the
    scenario, not the study's name, decides — e.g. a study that compares new cells against the tuned
    ASGD of ``compression-tuned`` takes its runs instead of running them again."""
    taken, stale = 0, []
    for cell in study.selected:
        for seed in study.spec.seed_list:
            sc = study.scenario(cell, seed)
            dest = results_dir(results, cell, seed)
            run = done_run(cell_dir(source, cell, seed), sc)
            compact = None if run is not None else compact_done(source, cell, seed, sc)
            if run is None and compact is None:
                if any(cell_dir(source, cell, seed).glob("*/summary.json")) or \
                        (cell_dir(source, cell, seed) / "summary.json").is_file():
                    stale.append(f"{cell.label} · seed {seed}")
                continue
            if compact is not None:
                if compact.resolve() != dest.resolve():
                    shutil.rmtree(dest, ignore_errors=True)
                    shutil.copytree(compact, dest)
            else:
                _compact(run, dest)
            show(f"{cell.label} · seed {seed}: {(run or compact)} → {dest}", True)
            taken += 1
    status = write_results_status(study, results)
    status["imported"], status["not_taken"] = taken, stale
    return status


def progress(study: Study, results: Optional[Path], out: Optional[Path] = None) -> dict:
    """Which cell × seed runs of ``study`` are complete — compact in ``results`` or as a run directory
    under ``out/<name>`` — of the same resolved scenario, and the commands that resume the rest.
    For a study with ``tuning:``, the tuning grid too (its runs in ``<results>-tuning``). Runs nothing."""
    from .tuning import tuning_study
    found: list[Path] = []   # every complete run, for what the rest costs

    def count(st: Study, res: Optional[Path], untuned: frozenset = frozenset()) -> list[dict]:
        sd = Path(out) / st.spec.name if out is not None else None
        rows = []
        for cell in st.cells:
            if cell.label in untuned:   # without a chosen α the cell's scenarios are not known yet
                rows.append({"cell": cell.id, "label": cell.label, "complete": [],
                             "missing": list(st.spec.seed_list), "note": "α not chosen yet"})
                continue
            done = {}
            for seed in st.spec.seed_list:
                run = complete_run(sd, res, cell, seed, st.scenario(cell, seed))
                if run is not None:
                    done[seed] = run
            found.extend(done.values())
            rows.append({"cell": cell.id, "label": cell.label, "complete": list(done),
                         "missing": [s for s in st.spec.seed_list if s not in done]})
        return rows

    out_dict: dict = {"study": study.spec.name, "file": str(study.path),
                      "results": str(results) if results else None}
    commands = []
    untuned_labels = study.untuned()
    untuned = frozenset(untuned_labels)
    if study.spec.tuning is not None:
        tres = Path(f"{results}-tuning") if results else None
        grid = count(tuning_study(study), tres)
        out_dict["tuning"] = {"results": str(tres) if tres else None, "cells": grid,
                              "complete": sum(len(r["complete"]) for r in grid),
                              "total": sum(len(r["complete"]) + len(r["missing"]) for r in grid),
                              "untuned": untuned_labels}
        if untuned:
            commands.append(f"edgebed study tune {study.path}" + (f" --results {tres}" if tres else ""))
        found.clear()            # the tuning runs are short: they say nothing of a full run's cost
    rows = count(study, results, untuned)
    out_dict["cells"] = rows
    out_dict["complete"] = sum(len(r["complete"]) for r in rows)
    out_dict["total"] = len(study.cells) * len(study.spec.seed_list)
    walls = [w for w in (read_json(run, "summary.json").get("wall_time_s") for run in found)
             if isinstance(w, (int, float)) and w > 0]
    out_dict["median_run_s"] = float(np.median(walls)) if walls else None
    out_dict["numerics"] = numerics.summarize([numerics.of_run(run) for run in found]) if found else None
    missing = out_dict["total"] - out_dict["complete"]
    out_dict["missing_core_hours"] = (round(missing * out_dict["median_run_s"] / 3600, 1)
                                      if walls and missing else None)
    if missing:
        commands.append(f"edgebed study run {study.path}" + (f" --results {results}" if results else ""))
    out_dict["resume"] = commands
    return out_dict
