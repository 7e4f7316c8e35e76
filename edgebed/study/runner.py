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
import os
import re
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import yaml
from pydantic import ValidationError

from ..rundir import write_json_atomic
from ..scenario import Scenario, ScenarioError, read_yaml
from .spec import Cell, CellSpec, Study, StudyError, StudySpec, _format
from .storage import cell_dir, complete_run, latest_run, status_entry, tuned_path


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


def _where(run: Path, sdir: Path) -> str:
    """A run's path as status.json records it: relative to the study dir when inside it."""
    try:
        return str(run.relative_to(sdir))
    except ValueError:
        return str(run.resolve())


def _run_one(study: Study, sdir: Path, cell: Cell, seed: int, run_cell: RunCell,
             show: Callable[[str, bool], None], head: str,
             results: Optional[Path] = None) -> tuple[dict, bool]:
    """Run (or skip, if already complete here or in ``results``) one cell × seed; returns its
    status entry and whether the user interrupted it."""
    sc = study.scenario(cell, seed)
    parent = cell_dir(sdir, cell, seed)
    entry = status_entry(study, cell, seed)
    done = complete_run(sdir, results, cell, seed, sc)
    if done is not None:
        entry.update(status="skipped", run=_where(done, sdir))
        show(f"{head}: already complete ({done.name}), skipped", True)
        return entry, False
    parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        res = run_cell(sc, parent, lambda line, final: show(f"{head} | {line}", False))
        summary = res.summary
        entry.update(status="complete" if summary.get("status") == "complete" else
                     str(summary.get("status", "failed")),
                     run=str(Path(res.path).relative_to(sdir)), error=summary.get("reason") or None)
        interrupted = str(summary.get("reason", "")).startswith("interrupted")
    except KeyboardInterrupt:
        entry.update(status="incomplete", error="interrupted by the user")
        interrupted = True
    except Exception as err:  # noqa: BLE001 — one bad cell must not end the study
        entry.update(status="failed", error=f"{type(err).__name__}: {err}")
        (parent / "error.txt").write_text(traceback.format_exc())
        run = latest_run(parent)
        entry["run"] = str(run.relative_to(sdir)) if run else None
        interrupted = False
    entry["wall_time_s"] = round(time.monotonic() - t0, 2)
    if entry["status"] == "complete":
        entry["error"] = None
    show(f"{head}: {entry['status']} in {entry['wall_time_s']:.1f} s"
         + (f" — {entry['error']}" if entry["error"] else ""), True)
    return entry, interrupted


def _recorded(study: Study, sdir: Path, cell: Cell, seed: int, results: Optional[Path] = None) -> dict:
    """The status entry of a cell × seed this invocation does not run: its complete run, if any."""
    sc = study.scenario(cell, seed)
    done = complete_run(sdir, results, cell, seed, sc)
    return status_entry(study, cell, seed, status="skipped" if done else "not run",
                  run=_where(done, sdir) if done else None)


class _EveryMinute:
    """Progress for a cell run in a worker process: final lines always, live lines once a minute
    (several cells share one terminal, so no carriage-return line)."""

    def __init__(self, period_s: float = 60.0):
        self.period_s, self.last = period_s, 0.0

    def __call__(self, line: str, final: bool) -> None:
        now = time.monotonic()
        if final or now - self.last >= self.period_s:
            self.last = now
            print(line, file=sys.stderr, flush=True)


_STUDY_PID: Optional[int] = None   # in a --jobs worker: the study process that started it


def _pool_init(study_pid: int) -> None:
    """A --jobs worker ends with the study process: SIGTERM when it dies (the run in progress ends as
    an interrupted run, recorded), and no queued cell starts after it (``_pool_job``). Without this
    a killed `study run` left its workers running their cells and then the ones queued for them."""
    global _STUDY_PID
    _STUDY_PID = study_pid
    from ..procs import die_with_parent
    die_with_parent(signal.SIGTERM, parent=study_pid)


def _pool_job(study: Study, sdir: Path, cell: Cell, seed: int, run_cell: RunCell,
              head: str, results: Optional[Path] = None) -> tuple[dict, bool]:
    if _STUDY_PID is not None and os.getppid() != _STUDY_PID:
        raise RuntimeError("the study process is gone; not starting another cell")
    return _run_one(study, sdir, cell, seed, run_cell, _EveryMinute(), head, results)


def run_study(study: Study, out: str | Path = "studies-out", run_cell: Optional[RunCell] = None,
              progress: Optional[Callable[[str, bool], None]] = None, jobs: int = 1,
              results: Optional[Path] = None) -> dict:
    """Run every cell × seed not already complete; returns (and writes) the status of the whole study.

    ``run_cell(scenario, out_dir, progress)`` runs one scenario (default: the Engine). An exception
    or a non-complete run marks that cell × seed failed/incomplete in status.json and the study goes
    on; a user interrupt (Ctrl-C) stops the study after recording it and raises KeyboardInterrupt.
    ``jobs > 1`` runs that many cells at once, each in its own (spawned) process; ``run_cell`` must
    then be picklable (a module-level function or :class:`EngineRunner`).
    ``results`` (e.g. ``benchmarks/results/studies/<name>``): a cell × seed with a complete compact
    result there of the same scenario is skipped, and each run completed now is compacted into it.
    """
    if jobs < 1:
        raise StudyError(f"jobs = {jobs}: give at least 1 (cells run at once)")
    missing = study.untuned()
    if missing:
        raise StudyError(f"{study.path}: no tuned α yet for {missing}; run `edgebed study tune "
                         f"{study.path}` first (it writes {tuned_path(study.path).name})")
    run_cell = run_cell or engine_runner(str(study.path))
    show = progress or (lambda line, final: None)
    sdir = Path(out) / study.spec.name
    sdir.mkdir(parents=True, exist_ok=True)
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
              "total": len(study.cells) * len(study.spec.seed_list), "selected": len(todo), "jobs": jobs,
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

    if jobs == 1:
        for (cell, seed), head in zip(todo, heads):
            entry, interrupted = _run_one(study, sdir, cell, seed, run_cell, show, head, results)
            entries.append(entry)
            save()
            if interrupted:
                raise KeyboardInterrupt
    else:
        _run_parallel(study, sdir, todo, heads, run_cell, jobs, entries, save, show, results)
    status["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    save()
    return status


def _run_parallel(study, sdir, todo, heads, run_cell, jobs, entries, save, show, results=None) -> None:
    """``jobs`` cells at a time in spawned processes; entries are kept in study order."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    slots: list[Optional[dict]] = [None] * len(todo)

    def publish() -> None:
        entries[:] = [e for e in slots if e is not None]
        save()

    show(f"running {len(todo)} cell × seed runs, {jobs} at a time", True)
    interrupted = False
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                             initializer=_pool_init, initargs=(os.getpid(),)) as pool:
        pending = {pool.submit(_pool_job, study, sdir, cell, seed, run_cell, head, results): i
                   for i, ((cell, seed), head) in enumerate(zip(todo, heads))}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = pending.pop(fut)
                    try:
                        slots[i], stop = fut.result()
                    except Exception as err:  # noqa: BLE001 — a dead worker process
                        cell, seed = todo[i]
                        slots[i], stop = {"cell": cell.id, "label": cell.label, "seed": seed,
                                          "overrides": list(cell.overrides), "baseline": None,
                                          "status": "failed", "run": None,
                                          "error": f"worker process: {type(err).__name__}: {err}",
                                          "wall_time_s": None}, False
                    interrupted |= stop
                    publish()
                if interrupted:
                    for fut in pending:
                        fut.cancel()
        except KeyboardInterrupt:
            interrupted = True
            for fut in pending:
                fut.cancel()
    publish()
    if interrupted:
        raise KeyboardInterrupt
