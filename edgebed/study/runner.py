"""Study: a base scenario swept over a grid of overrides × seeds, run cell by cell, resumable.

A study file names a base scenario, fixed overrides (``set``), a full grid (``sweep``: dotted key →
values) and/or explicit ``cells`` (override sets for non-grid studies), seeds, a target accuracy and
the baseline cell. Every cell × seed is one scenario, resolved through the same path as
``edgebed run --set`` (``scenario.apply_override``), and one run directory::

    <out>/<study name>/
        study.yaml                     the study file as read (plus the CLI --set overrides)
        status.json                    every cell × seed: status, run dir, error
        runs/<cell id>/seed-<s>/<scenario name>-<time>/    the Engine's run directory

A later invocation skips a cell × seed whose latest run dir is complete *and* was made from the
same resolved scenario (so editing the study reruns exactly what changed); a failed cell is
recorded in status.json and the study goes on.
"""
from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import yaml
from pydantic import ValidationError

from ..rundir import write_json_atomic
from ..scenario import Scenario, ScenarioError, read_yaml
from .spec import Cell, CellSpec, Study, StudyError, StudySpec, _format
from .storage import complete_run, recorded_path, status_entry, tuned_path


def _override(key: str, value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True).strip()
    return f"{key}={text.removesuffix('...').strip()}"   # a scalar document ends in '...'



def _show(value: Any) -> str:
    if isinstance(value, (list, dict)):
        return f"[{len(value)} items]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _label(items: dict[str, Any]) -> str:
    """``c=0.01 · name=adacomp``: last key component, the full key where two would collide."""
    last = [k.split(".")[-1] for k in items]
    return " · ".join(f"{k.split('.')[-1] if last.count(k.split('.')[-1]) == 1 else k}={_show(v)}"
                      for k, v in items.items())


def _slug(label: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9.]+", "-", label.lower())).strip("-") or "cell"


def expand(spec: StudySpec) -> list[Cell]:
    """All cells: each ``cells:`` entry (or one empty cell) × the full grid of ``sweep``."""
    entries = spec.cells or [CellSpec()]
    keys = list(spec.sweep)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(spec.sweep[k] for k in keys))]
    fixed = tuple(_override(k, v) for k, v in spec.set.items())
    if spec.dense_eval:
        near = sorted({spec.target, *spec.targets})
        fixed += (_override("eval.dense", {"near": near, **spec.dense_eval.model_dump()}),)
    cells, ids = [], set()
    for entry in entries:
        group = entry.label or _label(entry.set) if spec.cells else ""
        for point in points:
            sweep = _label(point)
            label = " · ".join(x for x in (group, sweep) if x) or spec.name
            cid, k = _slug(label), 2
            while cid in ids:
                cid, k = f"{_slug(label)}-{k}", k + 1
            ids.add(cid)
            overrides = (*fixed, *(_override(k, v) for k, v in entry.set.items()),
                         *(_override(k, v) for k, v in point.items()))
            cells.append(Cell(cid, label, overrides, group, sweep, entry.reference, entry.baseline))
    labels = [c.label for c in cells]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ValueError(f"cells have the same label {dup}; give each `cells:` entry its own `label:`")
    return cells


def load_study(path: str | Path, cli_set: tuple[str, ...] = ()) -> Study:
    """Read and validate a study file; every cell's scenario is resolved now, so errors come first."""
    path = Path(path)
    try:   # one reader for every YAML file: names the file for missing, binary, UTF-16, bad YAML
        data = read_yaml(path, "study")
    except ScenarioError as err:
        raise StudyError(str(err)) from None
    if not isinstance(data, dict):
        raise StudyError(f"{path}: the top level must be a mapping (name:, base:, sweep:, ...)")
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as err:
        raise StudyError(_format(err, str(path))) from None
    base_path = (path.parent / spec.base).resolve()
    if not base_path.is_file():
        raise StudyError(f"{path}: base: {spec.base!r} is not a file (looked at {base_path}); give the "
                         "base scenario's path relative to the study file")
    try:
        base = read_yaml(base_path) or {}
    except ScenarioError as err:
        raise StudyError(f"{path}: base: {err}") from None
    try:
        cells = expand(spec)
    except ValueError as err:
        raise StudyError(f"{path}: {err}") from None
    study = Study(spec, path, base, base_path, cells, tuple(cli_set), tuned=read_tuned(path, spec, cells))
    for cell in cells:
        b = cell.baseline or spec.baseline
        if b is not None and study.baseline_for(cell) is None:
            known = sorted({c.label for c in cells} | {c.group for c in cells if c.group})
            whose = f" (cell {cell.label!r})" if cell.baseline else ""
            raise StudyError(f"{path}: baseline: {b!r} names no cell{whose}; use one of {known}")
    for cell in cells:
        study.scenario(cell, spec.seed_list[0])
    return study


def read_tuned(path: Path, spec: StudySpec, cells: list[Cell]) -> Optional[dict]:
    """The chosen α per cell label from ``<study>.tuned.yaml`` (None: not tuned yet)."""
    tp = tuned_path(path)
    if spec.tuning is None or not tp.is_file():
        return None
    redo = f"delete it and run `edgebed study tune {path}`"
    try:
        data = yaml.safe_load(tp.read_text()) or {}
    except yaml.YAMLError as err:
        raise StudyError(f"{tp}: not valid YAML ({err}); {redo}") from None
    chosen = data.get("chosen") if isinstance(data, dict) else None
    if not isinstance(chosen, dict):
        raise StudyError(f"{tp}: no 'chosen:' mapping (cell label → α); {redo}")
    unknown = sorted(set(chosen) - {c.label for c in cells})
    if unknown:
        raise StudyError(f"{tp}: chosen α for cells {unknown} that {path} does not have; rerun "
                         f"`edgebed study tune {path}`")
    bad = {k: v for k, v in chosen.items()
           if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0}
    if bad:
        raise StudyError(f"{tp}: chosen α must be numbers > 0, got {bad}; {redo}")
    return {k: float(v) for k, v in chosen.items()}


# -- running ---------------------------------------------------------------------------------------

RunCell = Callable[[Scenario, Path, Callable[[str, bool], None]], Any]   # → object with .path, .summary


@dataclass(frozen=True)
class EngineRunner:
    """The default ``run_cell``: one cell × seed through the Engine (picklable, for ``jobs > 1``)."""
    source: str

    def __call__(self, sc: Scenario, out: Path, progress) -> Any:
        from ..emulator.engine import Engine
        return Engine(sc, out, progress, source=self.source).run()


def engine_runner(source: str) -> RunCell:
    return EngineRunner(source)


def _recorded(study: Study, sdir: Path, cell: Cell, seed: int, results: Optional[Path] = None) -> dict:
    """The status entry of a cell × seed this invocation does not run: its complete run, if any."""
    sc = study.scenario(cell, seed)
    done = complete_run(sdir, results, cell, seed, sc)
    return status_entry(study, cell, seed, status="skipped" if done else "not run",
                  run=recorded_path(done, sdir) if done else None)


def run_study(study: Study, out: str | Path = "studies-out", run_cell: Optional[RunCell] = None,
              progress: Optional[Callable[[str, bool], None]] = None, jobs: int = 1,
              results: Optional[Path] = None, executor=None, retries: int = 2) -> dict:
    """Run every cell × seed not already complete; returns (and writes) the status of the whole study.

    ``run_cell(scenario, out_dir, progress)`` runs one scenario (default: the Engine). An exception
    or a non-complete run marks that cell × seed failed/incomplete in status.json and the study goes
    on; a user interrupt (Ctrl-C) stops the study after recording it and raises KeyboardInterrupt.
    ``executor`` (``study/executors``) runs the cell × seed tasks; default: the local one with
    ``jobs`` processes (``jobs > 1``: spawned processes, so ``run_cell`` must be picklable — a
    module-level function or :class:`EngineRunner`). A task whose worker dies is run again up to
    ``retries`` times, then recorded failed. One driver at a time per study directory (a lock file).
    ``results`` (e.g. ``benchmarks/results/studies/<name>``): a cell × seed with a complete compact
    result there of the same scenario is skipped, and each run completed now is compacted into it.
    """
    from .executors import make_executor
    from .lock import StudyLock
    if jobs < 1:
        raise StudyError(f"jobs = {jobs}: give at least 1 (cells run at once)")
    if retries < 0:
        raise StudyError(f"retries = {retries}: give 0 or more")
    missing = study.untuned()
    if missing:
        raise StudyError(f"{study.path}: no tuned α yet for {missing}; run `edgebed study tune "
                         f"{study.path}` first (it writes {tuned_path(study.path).name})")
    run_cell = run_cell or engine_runner(str(study.path))
    show = progress or (lambda line, final: None)
    sdir = Path(out) / study.spec.name
    sdir.mkdir(parents=True, exist_ok=True)
    what = f"edgebed study run {study.path}"
    with StudyLock(sdir, what), (StudyLock(results, what) if results is not None else _nothing()):
        owned = executor is None
        executor = executor or make_executor("local", workers=jobs)
        try:
            return _run_locked(study, sdir, run_cell, show, executor, results, retries)
        finally:
            if owned:
                executor.shutdown(wait=False, cancel_futures=True)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def _run_locked(study: Study, sdir: Path, run_cell: RunCell, show, executor, results, retries) -> dict:
    from .execute import drive
    text = study.path.read_text()
    if study.cli_set:
        text += "\n# command line --set:\n" + "".join(f"#   {s}\n" for s in study.cli_set)
    (sdir / "study.yaml").write_text(text)
    todo = [(c, s) for c in study.selected for s in study.run_seeds]
    heads = [f"[{i}/{len(todo)}] {c.label} · seed {s}" for i, (c, s) in enumerate(todo, start=1)]
    entries: list[dict] = []
    status = {"study": study.spec.name, "file": str(study.path), "base": str(study.base_path),
              "description": study.spec.description, "target": study.spec.target,
              "targets": study.spec.targets, "smoothing": study.spec.smoothing,
              "protocol": study.spec.protocol, "tuned": study.tuned,
              "baseline": study.spec.baseline, "reference_source": study.spec.reference_source,
              "total": len(study.cells) * len(study.spec.seed_list), "selected": len(todo),
              "jobs": executor.workers or 0, "executor": executor.describe(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cells": []}

    # cells and seeds left out by --cells / --seeds stay in status.json as they are on disk, so the
    # report keeps them and the totals count the whole study
    running = {(c.id, s) for c, s in todo}
    others = [_recorded(study, sdir, c, s, results) for c in study.cells for s in study.spec.seed_list
              if (c.id, s) not in running]
    order = {(c.id, s): i for i, (c, s) in enumerate((c, s) for c in study.cells for s in study.spec.seed_list)}

    exported: set = set()

    def save() -> None:
        status["cells"] = sorted(entries + others, key=lambda e: order[(e["cell"], e["seed"])])
        for k in ("complete", "skipped", "failed", "incomplete", "not run"):
            status[k] = sum(e["status"] == k for e in status["cells"])
        write_json_atomic(sdir / "status.json", status)
        if results is not None:
            from .results import export_new
            export_new(study, sdir, results, status["cells"], exported, show)

    interrupted = drive(study, sdir, todo, heads, run_cell, executor, entries, save, show, results, retries)
    status["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save()
    if interrupted:
        raise KeyboardInterrupt
    return status
