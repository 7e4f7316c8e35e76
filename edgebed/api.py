"""The public Python API: ``edgebed.load_run(path)`` and ``edgebed.list_runs(dirs)``.

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
from typing import Iterable

import pandas as pd

from . import datadict, rundir
from .analysis.runs import ReportError, load_run as _load

__all__ = ["RunData", "load_run", "list_runs", "ReportError"]


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
