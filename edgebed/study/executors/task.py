"""One cell × seed as a task: what travels to a worker (:class:`CellTask`) and back (:class:`CellOutcome`).

A task carries the *resolved* scenario (not the study file or the base scenario's path), so a worker
needs no copy of the study. Where the run directory goes depends on the executor:

- it shares the driver's filesystem (the local pool): the run directory is made in the study
  directory, as ``edgebed study run`` always did, and the outcome names it;
- it does not (Ray, SLURM): the run is made in a temporary directory on the worker, compacted there
  (``analysis/compact.py``: scenario.yaml, summary.json, evals.csv — tens of KB) and the compact
  files travel back in the outcome; the driver writes them into the study directory. No results
  directory has to be shared with the workers.

A cell that fails on its own (an exception in the emulation, a diverged run) gives a failed outcome;
the task raises only when its process is lost, which the executor reports as ``WorkerLost``.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ...scenario import Scenario


@dataclass(frozen=True)
class CellTask:
    key: tuple[str, int]             # (cell id, seed)
    head: str                        # "[3/18] adacomp c=0.01 · seed 2": progress lines
    scenario: Scenario
    run_cell: Any                    # picklable (scenario, out dir, progress) → object with .path, .summary
    run_parent: Optional[str] = None   # the cell × seed's directory in the study dir, if the worker sees it


@dataclass
class CellOutcome:
    key: tuple[str, int]
    status: str                      # complete | failed | incomplete | diverged ... (the run's summary status)
    error: Optional[str]
    wall_time_s: float
    worker: str                      # host:pid that ran it
    interrupted: bool = False        # the user pressed Ctrl-C during it
    run: Optional[str] = None        # the run directory (shared filesystem only)
    run_name: Optional[str] = None   # the run directory's name
    compact: dict[str, bytes] = field(default_factory=dict)   # file name → content (no shared filesystem)
    traceback: Optional[str] = None


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_task(task: CellTask, progress: Optional[Callable[[str, bool], None]] = None) -> CellOutcome:
    """Run one cell × seed here (on the worker); never raises for a failure of the cell itself."""
    show = progress or (lambda line, final: None)
    t0 = time.monotonic()
    if task.run_parent is not None:
        parent = Path(task.run_parent)
        parent.mkdir(parents=True, exist_ok=True)
        scratch = None
    else:
        scratch = Path(tempfile.mkdtemp(prefix="edgebed-cell-"))
        parent = scratch / "run"
        parent.mkdir()
    out = CellOutcome(task.key, "failed", None, 0.0, worker_name())
    try:
        try:
            res = task.run_cell(task.scenario, parent, lambda line, final: show(f"{task.head} | {line}", False))
            summary = res.summary
            out.status = "complete" if summary.get("status") == "complete" else str(summary.get("status", "failed"))
            out.error = None if out.status == "complete" else (summary.get("reason") or None)
            out.interrupted = str(summary.get("reason", "")).startswith("interrupted")
            run = Path(res.path)
        except KeyboardInterrupt:
            out.status, out.error, out.interrupted = "incomplete", "interrupted by the user", True
            run = _latest(parent)
        except Exception as err:  # noqa: BLE001 — one bad cell must not end the study
            out.error = f"{type(err).__name__}: {err}"
            out.traceback = traceback.format_exc()
            run = _latest(parent)
        out.run_name = run.name if run is not None else None
        if scratch is None:
            out.run = str(run) if run is not None else None
        elif run is not None and out.status == "complete":
            from ...analysis.compact import EVALS, write_compact
            dest = write_compact(run, scratch / "compact")
            out.compact = {name: (dest / name).read_bytes() for name in ("scenario.yaml", "summary.json", EVALS)}
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    out.wall_time_s = round(time.monotonic() - t0, 2)
    show(f"{task.head}: {out.status} in {out.wall_time_s:.1f} s" + (f" — {out.error}" if out.error else ""), True)
    return out


def _latest(parent: Path) -> Optional[Path]:
    from ...rundir import is_run_dir
    runs = sorted((p for p in parent.glob("*") if is_run_dir(p)), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def write_returned(outcome: CellOutcome, parent: Path) -> Optional[Path]:
    """On the driver: the compact files an outcome brought back, written as a run of ``parent`` (the
    cell × seed's directory in the study dir). Whole or absent: written beside, then renamed."""
    if not outcome.compact:
        return None
    parent.mkdir(parents=True, exist_ok=True)
    dest = parent / (outcome.run_name or "run")
    tmp = parent / f".{dest.name}.part"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, data in outcome.compact.items():
        (tmp / name).write_bytes(data)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest
