"""Reading results from Python: ``edgebed.load_run(path)``, ``edgebed.list_runs(dirs)``, and the question
runs answer, ``edgebed.ingress_to_target(runs, target)`` and ``edgebed.compare(runs, baseline, target)``
(starting runs and studies: ``edgebed/launch.py``).

    >>> import edgebed
    >>> run = edgebed.load_run("runs/quickstart-20261123-101500")
    >>> run.evals.plot(x="ingress_bytes", y="accuracy")
    >>> run.evals.attrs["units"]["ingress_bytes"]
    'B'

Every table is a pandas DataFrame with a ``run`` column (the run id) so frames of several runs
concatenate; ``frame.attrs["units"]`` maps each column to its unit (see docs/data-dictionary.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

import pandas as pd

from . import datadict, rundir
from .analysis.runs import ReportError, check_target, load_run as _load

__all__ = ["RunData", "load_run", "list_runs", "ingress_to_target", "compare", "ReportError"]


@dataclass(frozen=True)
class RunData:
    """One run directory, read back. ``scenario``, ``summary``, ``manifest`` are the JSON/YAML files
    as dicts; ``updates``, ``evals``, ``events``, ``traffic`` (per device), ``traffic_by_type`` (per
    wire message type) are DataFrames whose columns docs/data-dictionary.md describes."""
    run_id: str               # the run directory's name, e.g. quickstart-20261123-101500
    path: Path
    scenario: dict
    summary: dict
    manifest: dict
    updates: pd.DataFrame
    evals: pd.DataFrame
    events: pd.DataFrame
    traffic: pd.DataFrame
    traffic_by_type: pd.DataFrame

    @property
    def status(self) -> str:
        return str(self.summary.get("status", "unknown"))


def _frame(df: pd.DataFrame, table: str, run_id: str) -> pd.DataFrame:
    df = df.copy()
    df.insert(0, "run", run_id)
    df.attrs["units"] = {"run": "id", **datadict.units(table)}
    df.attrs["table"] = table
    return df


def load_run(path: str | Path) -> RunData:
    """Read a run directory made by ``edgebed run``. Raises ``ReportError`` (a ValueError) saying
    which path and what to do when it is not one or a file in it is damaged."""
    run = _load(path)
    run_id = run.path.resolve().name
    try:
        events = rundir.read_table(run.path, "events")
    except Exception as err:  # pyarrow raises several types for bad parts
        raise ReportError(f"{run.path}: an events part is unreadable ({err}); delete the damaged "
                          "part-*.parquet file") from None
    traffic = rundir.read_json(run.path, "traffic.json")
    classes = _classes(run.scenario) if traffic.get("by_device") else {}
    per_device = pd.DataFrame(
        [{"device": int(d), "speed_class": classes.get(int(d), ""), **v}
         for d, v in (traffic.get("by_device") or {}).items()],
        columns=list(datadict.COLUMNS["traffic"]))
    per_type = pd.DataFrame([{"message_type": k, **v} for k, v in (traffic.get("by_kind") or {}).items()],
                            columns=list(datadict.COLUMNS["traffic_by_type"]))
    return RunData(run_id, run.path, run.scenario, run.summary, rundir.read_json(run.path, "manifest.json"),
                   _frame(run.updates, "updates", run_id), _frame(run.evals, "evals", run_id),
                   _frame(events, "events", run_id), _frame(per_device, "traffic", run_id),
                   _frame(per_type, "traffic_by_type", run_id))


def _classes(scenario: dict) -> dict[int, str]:
    """Device → speed class name, from the resolved scenario (as the engine assigned them)."""
    from .scenario import Scenario, class_assignment
    try:
        sc = Scenario.model_validate(scenario)
    except Exception:  # a scenario of an older version: the per-device table just has no classes
        return {}
    names = [c.name for c in sc.workers.classes]
    return {d: names[k] for d, k in enumerate(class_assignment(sc))}


def list_runs(dirs: Iterable[str | Path] = ("runs",), sort: str = "started", status: str | None = None,
              algorithm: str | None = None, match: str | None = None) -> pd.DataFrame:
    """One row per run directory found in ``dirs`` (each a run, or a folder searched at any depth,
    study folders included): run id, status (``killed`` when its engine is gone), scenario,
    algorithm, c, runtime, devices, updates, final accuracy, PS ingress bytes, start time (ISO),
    wall time in s, path. Sorted by ``sort`` (started, run, status, updates, accuracy, ingress,
    duration, devices); ``status``, ``algorithm`` and ``match`` (a glob on run id or scenario) filter."""
    from .analysis.listing import ListingError, list_runs as _list
    try:
        return _list(dirs, sort=sort, status=status, algorithm=algorithm, match=match)
    except ListingError as err:
        raise ReportError(str(err)) from None


RunLike = Union[RunData, str, Path]


def _runs(runs) -> list:
    """RunData, run directories or a list of them → analysis Runs (the report's reader)."""
    items = [runs] if isinstance(runs, (RunData, str, Path)) else list(runs)
    if not items:
        raise ReportError("no runs given")
    return [_load(r.path if isinstance(r, RunData) else r) for r in items]


def _group(run) -> str:
    """A run's group when none is given: its algorithm, with c for the compressing ones (``adacomp
    c=0.01``) — what a comparison of algorithms over seeds groups by."""
    algo = run.algorithm_params
    c = algo.get("c")
    return run.algorithm + (f" c={c:g}" if isinstance(c, (int, float)) else "")


def ingress_to_target(runs: RunLike | Iterable[RunLike], target: float, window: int = 1) -> pd.DataFrame:
    """The number edgebed exists for, per run: the first applied update at which test accuracy (its
    moving average over ``window`` evaluations) reached ``target`` (a fraction, e.g. 0.95), and the
    PS ingress in bytes by then (every message type; NaN when the run never reached it). Columns: run,
    group, seed, algorithm, c, reached, updates_to_target, ingress_to_target (B), bytes_per_update
    (B), best_accuracy (smoothed), path."""
    from .analysis.targets import run_record
    check_target(target)
    rows = []
    for r in _runs(runs):
        rec = run_record(r, [target], window, paper=False)
        k = f"{100 * target:g}"
        upd, ing = rec[f"updates_to_{k}"], rec[f"ingress_to_{k}"]
        rows.append({"run": r.name, "group": _group(r), "seed": r.scenario.get("seed"), "algorithm": r.algorithm,
                     "c": r.algorithm_params.get("c"), "reached": upd is not None,
                     "updates_to_target": upd, "ingress_to_target": ing,
                     "bytes_per_update": ing / upd if upd else None,
                     "best_accuracy": rec["smoothed_best"], "path": str(r.path)})
    df = pd.DataFrame(rows)
    df.attrs["units"] = {"ingress_to_target": "B", "bytes_per_update": "B", "updates_to_target": "updates"}
    return df


def compare(runs: Iterable[RunLike], baseline: str, target: float, window: int = 1,
            by: Optional[Callable[[RunData], str]] = None) -> pd.DataFrame:
    """Groups of runs (seeds) against a baseline group at ``target``: per group the seeds that reached
    it, updates and ingress to it (mean, min, max), bytes per update, and ``ingress_ratio`` = the
    baseline's mean ingress to target / the group's, split into ``bytes_per_update_factor`` ×
    ``updates_factor``, with ``ratio_min``–``ratio_max`` over seed pairs (seed s vs seed s of the
    baseline, where both reached it). Groups are the runs' algorithm and c (``adacomp c=0.01``) unless
    ``by`` (RunData → name) says otherwise; ``baseline`` names one of them."""
    from .analysis.targets import run_row, target_table
    check_target(target)
    loaded = _runs(runs)
    names = [by(load_run(r.path)) for r in loaded] if by else [_group(r) for r in loaded]
    if baseline not in names:
        raise ReportError(f"baseline {baseline!r} names no group of these runs; the groups are "
                          f"{sorted(set(names))}")
    per_run = pd.DataFrame([run_row(g, g, int(r.scenario.get("seed") or 0), r, [target], window, paper=False)
                            for g, r in zip(names, loaded)])
    return target_table(per_run, target, {g: baseline for g in names})
