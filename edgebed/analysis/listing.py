"""The list of runs (`edgebed runs`, ``edgebed.list_runs``): every run directory under some folders —
study folders included — one row each, with the numbers a researcher compares runs by.

A run's status is ``rundir.run_status`` (a run whose engine is gone is ``killed``, as the report says);
a run that was never closed (running or killed) has no final numbers in summary.json, so its
updates and ingress come from what it recorded (the updates table, traffic.json).
"""
from __future__ import annotations

import fnmatch
import math
import os
import re
import time
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd
import yaml

from .. import rundir
from ..algorithms import own_keys
from .runs import numeric_scenario

COLUMNS = ["run", "status", "scenario", "algorithm", "c", "runtime", "devices", "updates", "final_accuracy",
           "ingress_bytes", "started", "wall_time_s", "path"]
# `edgebed runs --sort` keys → columns (started: the manifest's ISO time, which sorts as text)
SORT_KEYS = {"started": "started", "run": "run", "status": "status", "updates": "updates",
             "accuracy": "final_accuracy", "ingress": "ingress_bytes", "duration": "wall_time_s",
             "devices": "devices"}
_TABLE_DIRS = set(rundir.TABLES) | {"logs", "report", "checkpoint", "gate"}
_STAMPED = re.compile(r"-\d{8}-\d{6}(-\d+)?$")


class ListingError(ValueError):
    """A folder to list that does not exist: says which and what to pass."""


def find_runs(dirs: Iterable[str | Path]) -> list[Path]:
    """Run directories in ``dirs`` (each a run, or a folder searched at any depth — a study's
    ``runs/<cell>/seed-<k>/<run>/`` too), without descending into a run directory."""
    return [p for p, _ in _find(dirs)]


def _run_id(run: Path, root: Path) -> str:
    """The run directory's name (``<name>-<YYYYmmdd-HHMMSS>``); for a compact study result, whose
    directory is just ``seed-<k>``, its path under the folder searched (``<cell>/seed-<k>``)."""
    if _STAMPED.search(run.name) or run == root:
        return run.name
    try:
        rel = run.relative_to(root)
    except ValueError:
        return run.name
    return str(Path(*[p for p in rel.parts if p != "runs"]))


def _find(dirs: Iterable[str | Path]) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for d in map(Path, dirs):
        if rundir.is_run_dir(d):
            found.append((d, d.name))
            continue
        if not d.is_dir():
            raise ListingError(f"{d}: no such directory; pass a run directory or a folder of runs "
                               "(runs/, studies-out/<study>/)")
        for root, subdirs, _ in os.walk(d):
            here = Path(root)
            if rundir.is_run_dir(here):
                found.append((here, _run_id(here, d)))
                subdirs[:] = []
                continue
            subdirs[:] = sorted(s for s in subdirs if s not in _TABLE_DIRS and not s.startswith("."))
    return list(dict(found).items())


def _rows_recorded(run: Path) -> Optional[int]:
    """Rows of the updates table on disk (Parquet footers only: cheap)."""
    import pyarrow.parquet as pq
    try:
        return sum(pq.ParquetFile(p).metadata.num_rows for p in (run / "updates").glob("part-*.parquet"))
    except Exception:  # noqa: BLE001 — a damaged part: the count is unknown, the run still listed
        return None


def _seconds(started: Optional[str]) -> Optional[float]:
    try:
        return time.mktime(time.strptime(started, "%Y-%m-%dT%H:%M:%S%z")) if started else None
    except (ValueError, TypeError):
        return None


def run_row(run: Path, run_id: str | None = None) -> dict:
    """One run's row (see ``COLUMNS``); missing values are None."""
    summary, manifest = rundir.read_json(run, "summary.json"), rundir.read_json(run, "manifest.json")
    try:
        sc = yaml.safe_load((run / "scenario.yaml").read_text()) or {}
        sc = numeric_scenario(sc) if isinstance(sc, dict) else {}
    except Exception:  # noqa: BLE001 — a damaged run is still listed
        sc = {}
    algo = own_keys(sc.get("algorithm") or {}) if isinstance(sc.get("algorithm"), dict) else {}
    status = rundir.run_status(run)
    updates, ingress, wall = summary.get("updates"), summary.get("ingress_bytes"), summary.get("wall_time_s")
    if status in ("running", "killed") or updates is None:   # never closed: what it recorded
        updates = _rows_recorded(run)
        ingress = rundir.read_json(run, "traffic.json").get("ingress_bytes")
        t0 = _seconds(manifest.get("started"))
        if t0 is not None:
            written = [p.stat().st_mtime for p in [*run.glob("*/part-*.parquet"), run / "traffic.json"]
                       if p.exists()]
            end = time.time() if status == "running" else max(written, default=None)
            wall = round(end - t0, 1) if end is not None else None
    return {"run": run_id or run.name, "status": status, "scenario": sc.get("name"), "algorithm": algo.get("name"),
            "c": algo.get("c"), "runtime": (sc.get("runtime") or {}).get("name", "local")
            if isinstance(sc.get("runtime"), dict) else sc.get("runtime", "local"),
            "devices": (sc.get("workers") or {}).get("n"), "updates": updates,
            "final_accuracy": summary.get("final_accuracy"), "ingress_bytes": ingress,
            "started": manifest.get("started"), "wall_time_s": wall, "path": str(run)}


def list_runs(dirs: Iterable[str | Path] = ("runs",), sort: str = "started", status: Optional[str] = None,
              algorithm: Optional[str] = None, match: Optional[str] = None) -> pd.DataFrame:
    """A frame of ``COLUMNS``, one row per run found in ``dirs``, sorted by ``sort`` (a ``SORT_KEYS``
    key, ascending; runs without the value last) and filtered by status, algorithm and a glob on the
    run id or scenario name (``match``)."""
    if sort not in SORT_KEYS:
        raise ListingError(f"--sort {sort}: sort by one of {', '.join(SORT_KEYS)}")
    rows = [run_row(p, rid) for p, rid in _find(dirs)]
    if status:
        rows = [r for r in rows if r["status"] == status]
    if algorithm:
        rows = [r for r in rows if r["algorithm"] == algorithm]
    if match:
        rows = [r for r in rows if fnmatch.fnmatch(r["run"], match) or fnmatch.fnmatch(str(r["scenario"]), match)]
    key = SORT_KEYS[sort]
    rows.sort(key=lambda r: r["run"])
    rows.sort(key=lambda r: (r[key] is None or (isinstance(r[key], float) and math.isnan(r[key])),
                             r[key] if r[key] is not None else 0))
    return pd.DataFrame(rows, columns=COLUMNS)


def strict_records(df: pd.DataFrame) -> list[dict]:
    """The rows as JSON-ready dicts: NaN → None (strict JSON has no NaN), numpy scalars → Python."""
    out = []
    for rec in df.to_dict("records"):
        clean = {}
        for k, v in rec.items():
            if hasattr(v, "item"):
                v = v.item()
            clean[k] = None if isinstance(v, float) and not math.isfinite(v) else v
        out.append(clean)
    return out
