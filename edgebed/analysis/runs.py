"""A run directory read back for analysis, with errors that tell the user which path and what to do.

Reading is lenient about content (a run killed mid-way, or one that never evaluated, is still a
run) and strict about form (a path that is not a run directory is refused with a reason).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from .. import rundir
from ..algorithms import own_keys


class ReportError(ValueError):
    """A report that can't be made: says which path, what's wrong and what to do."""


def check_target(target: float) -> None:
    """A target test accuracy must be a fraction: raise ReportError otherwise (97 → use 0.97)."""
    if not 0 < target <= 1:
        raise ReportError(f"target accuracy {target!r} must be a fraction in (0, 1], e.g. 0.97")


@dataclass(frozen=True)
class Run:
    path: Path
    name: str            # unique among the runs of one report (the run dir's name)
    scenario: dict       # the resolved scenario as written into the run dir
    summary: dict        # summary.json
    updates: pd.DataFrame
    evals: pd.DataFrame

    @property
    def algorithm_params(self) -> dict:
        """The scenario's ``algorithm`` section with only its algorithm's own keys (c only where the
        rule compresses), whichever form the run recorded (older runs: every algorithm's keys)."""
        return own_keys(self.scenario.get("algorithm") or {})

    @property
    def algorithm(self) -> str:
        return str(self.algorithm_params.get("name", "unknown"))

    @property
    def label(self) -> str:
        """Legend label: scenario name and algorithm (with c for the compressing ones)."""
        algo = self.algorithm_params
        text = f"{self.scenario.get('name', self.name)} · {self.algorithm}"
        if isinstance(algo.get("c"), (int, float)):
            text += f" c={algo['c']:g}"
        return text


def _not_a_run(path: Path) -> ReportError:
    if not path.exists():
        return ReportError(f"{path}: no such directory; pass a run directory made by `edgebed run` "
                           "(runs/<name>-<timestamp>/)")
    if not path.is_dir():
        return ReportError(f"{path}: is a file, not a run directory; pass the directory that "
                           "contains scenario.yaml and summary.json")
    inside = sorted(p.name for p in path.iterdir() if rundir.is_run_dir(p))
    if inside:
        shown = ", ".join(inside[:3]) + (", ..." if len(inside) > 3 else "")
        return ReportError(f"{path}: is not a run directory but contains {len(inside)} runs "
                           f"({shown}); pass those instead, e.g. {path}/*")
    missing = [f for f in ("scenario.yaml", "summary.json") if not (path / f).exists()]
    return ReportError(f"{path}: not a run directory (missing {' and '.join(missing)}); pass a "
                       "directory made by `edgebed run` (runs/<name>-<timestamp>/)")


def numeric_scenario(recorded: dict) -> dict:
    """A run's recorded scenario with rates and durations as numbers (bits/s, seconds), whichever way it
    was written: runs since 2026-11-28 write units (``2mbit``, ``0.02s``) so that their scenario.yaml
    runs again, older ones bare numbers. Analysis reads numbers. A scenario the schema no longer takes
    (an older version's keys) is returned as recorded."""
    from ..scenario import Scenario
    try:
        return Scenario.model_validate(recorded).to_dict(units=False)
    except Exception:  # noqa: BLE001 — an older run's scenario: read as it is
        return recorded


def load_run(path: str | Path, name: str | None = None) -> Run:
    """Read a run directory; raises ReportError when ``path`` is not one or its files are corrupt."""
    path = Path(path)
    if not rundir.is_run_dir(path):
        raise _not_a_run(path)
    try:
        scenario = yaml.safe_load((path / "scenario.yaml").read_text()) or {}
        summary = rundir.read_json(path, "summary.json")
        scenario = numeric_scenario(scenario) if isinstance(scenario, dict) else scenario
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ReportError(f"{path}: scenario.yaml or summary.json is unreadable ({err}); the run "
                          "directory is damaged, re-run the scenario") from None
    if not isinstance(scenario, dict) or not isinstance(summary, dict):
        raise ReportError(f"{path}: scenario.yaml and summary.json must each hold a mapping; the "
                          "run directory is damaged, re-run the scenario")
    if summary.get("status") == "running" and rundir.run_status(path) == "killed":
        summary = {**summary, "status": "killed"}   # its engine is gone: nothing will close it
    try:
        updates = rundir.read_table(path, "updates")
        evals = rundir.read_table(path, "evals")
    except Exception as err:  # pyarrow raises several types for bad parts
        raise ReportError(f"{path}: a table part is unreadable ({err}); delete the damaged "
                          "part-*.parquet file or re-run the scenario") from None
    return Run(path, name or path.name, scenario, summary, updates, evals)


def load_runs(paths: list[str | Path]) -> list[Run]:
    """Read several runs; names are the dir names, prefixed with the parent's where they collide."""
    if not paths:
        raise ReportError("no run directories given; pass one or more, e.g. runs/<name>-<timestamp>/")
    paths = [Path(p) for p in paths]
    seen = set()
    for p in paths:
        if p.resolve() in seen:
            raise ReportError(f"{p}: given twice; pass each run directory once")
        seen.add(p.resolve())
    counts: dict[str, int] = {}
    for p in paths:
        counts[p.resolve().name] = counts.get(p.resolve().name, 0) + 1
    runs = []
    for p in paths:
        r = p.resolve()
        runs.append(load_run(p, r.name if counts[r.name] == 1 else f"{r.parent.name}/{r.name}"))
    return runs
