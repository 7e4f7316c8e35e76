"""Compact results: what a study commits of each run, so studies resume and report without run dirs.

A run directory's ``updates`` table (one row per applied update, ~10 MB at 250,000 updates) is too
big to commit. A compact result keeps what the study report and the README need::

    <results>/runs/<cell id>/seed-<s>/
        scenario.yaml     the resolved scenario (the resume check compares it)
        summary.json      the run's summary.json + ``compact``: staleness (τ, AdaComp σ) mean/p50/p90,
                          crash times, applied updates per speed class, bytes per push (ours and the
                          paper's encoding), the source run dir
        evals.csv         the evals table + ``paper_bytes`` (cumulative pushes in the paper's encoding)

``<results>`` has the study directory's layout (``status.json`` whose ``run`` entries point at the
compact dirs), so ``edgebed study report <results>`` works on it as on a study directory.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import yaml

from .. import rundir
from ..atomic import replacing
from ..scenario import ModelSpec
from . import paper_bytes
from .metrics import class_shares
from .runs import Run, load_run, numeric_scenario

EVALS = "evals.csv"


def is_compact(path: Path) -> bool:
    return (path / EVALS).is_file() and "compact" in rundir.read_json(path, "summary.json")


def _quantiles(s: pd.Series) -> Optional[dict]:
    s = s.dropna()
    if s.empty:
        return None
    return {"mean": float(s.mean()), "p50": float(s.quantile(0.5)), "p90": float(s.quantile(0.9)),
            "max": float(s.max())}


def _sim_steps(path: Path) -> Optional[int]:
    """The SGD steps a sim run's devices computed (``sim.json`` gradients; None for other runtimes)."""
    return rundir.read_json(path, "sim.json").get("gradients") if (path / "sim.json").is_file() else None


def compact_of(run: Run, paper: bool = True) -> tuple[dict, pd.DataFrame]:
    """(summary.json with its ``compact`` section, evals with ``paper_bytes``) of a full run;
    ``paper=False``: paper bytes NaN (no torch import for the model's shapes)."""
    algo = run.algorithm_params
    model = {"name": ModelSpec().name, **(run.scenario.get("model") or {})}   # with its args: its own size
    per = paper_bytes.per_update(model, str(algo.get("name")), float(algo.get("c", 1.0))) if paper else float("nan")
    up = run.updates
    events = rundir.read_table(run.path, "events") if (run.path / "events").is_dir() else pd.DataFrame()
    crashes = events[events["event"] == "crash"] if not events.empty else events
    sigma = up["sigma_mean"] if not up.empty else pd.Series(dtype=float)   # NaN but for AdaComp
    compact = {
        "source": run.path.name,
        "staleness_tau": _quantiles(up["staleness"].astype(float)) if not up.empty else None,
        # per update, the mean over its sent entries of σ_k; summarised over the updates
        "adacomp_sigma_mean": _quantiles(sigma),
        "crashes": {"count": int(len(crashes)),
                    "updates": [int(u) for u in crashes["update"]] if len(crashes) else [],
                    "virtual_times": [float(t) for t in crashes["virtual_time"]] if len(crashes) else [],
                    "median_update": float(np.median(crashes["update"])) if len(crashes) else None},
        "classes": class_shares(up).to_dict("records") if not up.empty else [],
        "push_bytes_per_update": float(up["bytes_in"].mean()) if not up.empty else None,
        "paper_bytes_per_update": per,
        "paper_bytes_model": "edgebed.analysis.paper_bytes (pickle protocol 2 of index/value lists)",
        "numerics": rundir.read_json(run.path, "manifest.json").get("numerics"),   # None: before fingerprints
        # virtual clock: SGD steps all devices computed (local steps of the averaging rules), to the end
        "sgd_steps": _sim_steps(run.path),
    }
    evals = run.evals.sort_values("update", kind="stable").reset_index(drop=True)
    evals["paper_bytes"] = evals["update"].astype(float) * per
    return {**run.summary, "compact": compact}, evals


def write_compact(run_dir: Path, dest: Path) -> Path:
    """Compact the run directory ``run_dir`` into ``dest`` (replaced whole, atomically per file);
    a compact result is copied as it is."""
    if is_compact(run_dir):
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("scenario.yaml", EVALS, "summary.json"):
            with replacing(dest / name) as tmp:
                shutil.copyfile(run_dir / name, tmp)
        return dest
    run = load_run(run_dir)
    summary, evals = compact_of(run)
    dest.mkdir(parents=True, exist_ok=True)
    with replacing(dest / "scenario.yaml") as tmp:
        shutil.copyfile(run_dir / "scenario.yaml", tmp)
    with replacing(dest / EVALS) as tmp:
        evals.to_csv(tmp, index=False)
    rundir.write_json_atomic(dest / "summary.json", summary)
    return dest


def load_compact(path: Path, name: Optional[str] = None) -> Run:
    """A compact result as a :class:`Run` (its ``updates`` table is empty; ``summary['compact']``
    holds what was kept of it)."""
    scenario = yaml.safe_load((path / "scenario.yaml").read_text()) or {}
    scenario = numeric_scenario(scenario) if isinstance(scenario, dict) else scenario
    evals = pd.read_csv(path / EVALS)
    return Run(path, name or path.name, scenario, rundir.read_json(path, "summary.json"),
               pd.DataFrame(), evals)


def load_any(path: Path, name: Optional[str] = None) -> Run:
    """A full run directory or a compact result."""
    return load_compact(path, name) if is_compact(path) else load_run(path, name)
