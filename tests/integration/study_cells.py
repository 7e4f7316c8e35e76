"""A tiny real study for the executor tests (MLP, virtual clock, a few hundred updates: seconds a
cell) and what "the same compact result" means when two executors ran a cell."""
from __future__ import annotations

import functools
import json
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

from edgebed.analysis.compact import compact_of
from edgebed.analysis.runs import load_run
from edgebed.analysis.compact import load_any, is_compact

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "scenarios" / "paper-fig3-adacomp.yaml"
# wall-clock facts of a run: they differ from run to run wherever it runs
WALL = {"wall_time_s", "updates_per_s", "fidelity"}


def write_smoke_study(where: Path, name: str = "exec-smoke", updates: int = 300, seeds: int = 1) -> Path:
    study = {"name": name, "base": str(BASE), "seeds": seeds, "target": 0.5, "baseline": "asgd",
             "set": {"runtime.name": "sim", "runtime.sim.threads": 1, "model.name": "mlp",
                     "workers.n": 4, "dataset.train_samples": 320, "algorithm.batch_size": 10,
                     "stop.updates": updates, "eval.every": 100, "eval.test_samples": 300},
             "cells": [{"label": "asgd", "set": {"algorithm.name": "asgd"}},
                       {"label": "adacomp c=0.01", "set": {"algorithm.name": "adacomp", "algorithm.c": 0.01}}]}
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def comparable(run: Path) -> tuple[dict, pd.DataFrame]:
    """(summary, evals) of a run directory or compact result without its wall-clock facts."""
    if is_compact(run):
        r = load_any(run)
        summary, evals = dict(r.summary), r.evals
    else:
        summary, evals = compact_of(load_run(run))
    compact = dict(summary.pop("compact"))
    compact.pop("source")
    compact["numerics"] = (compact.get("numerics") or {}).get("id")
    summary = {k: v for k, v in summary.items() if k not in WALL}
    evals = evals.drop(columns=["wall_time"]).sort_values("update").reset_index(drop=True)
    return {**summary, "compact": compact}, evals


def assert_same_result(a: Path, b: Path) -> None:
    sa, ea = comparable(a)
    sb, eb = comparable(b)
    assert sa == sb, {k: (sa.get(k), sb.get(k)) for k in set(sa) | set(sb) if sa.get(k) != sb.get(k)}
    pd.testing.assert_frame_equal(ea, eb, check_exact=True)


@functools.lru_cache(maxsize=None)
def local_reference(updates: int = 300) -> Path:
    """The smoke study run once by the local executor (in this process), for every comparison."""
    from edgebed.study.runner import load_study, run_study
    tmp = Path(tempfile.mkdtemp(prefix="edgebed-exec-ref-"))
    path = write_smoke_study(tmp / "study", updates=updates)
    status = run_study(load_study(path), tmp / "out")
    assert status["complete"] == status["total"] == 2, status
    return tmp / "out" / "exec-smoke"


def run_of(sdir: Path, cell: str, seed: int = 1) -> Path:
    runs = [p for p in (sdir / "runs" / cell / f"seed-{seed}").iterdir() if (p / "summary.json").is_file()]
    assert len(runs) == 1, runs
    return runs[0]


def kill_first_running(sdir: Path, kill, within: float = 120.0) -> dict:
    """Watch a study driver's live view (``<sdir>/progress.json``) until ``kill(task)`` acts on a task
    seen running: it returns what it did (a dict) or None (not one it can kill, yet). Returns that
    dict, or {} if nothing was killed within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            snap = json.loads((sdir / "progress.json").read_text())
        except (OSError, ValueError):
            snap = {"tasks": []}
        for t in snap["tasks"]:
            if t["state"] == "running" and t.get("worker"):
                done = kill(t)
                if done is not None:
                    return done
        time.sleep(0.2)
    return {}
