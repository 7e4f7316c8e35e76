"""Where a study's runs are stored and whether one is complete: run directories under the study
directory, compact results under a results directory, status.json entries, the tuned-α file.

The runner, the results exporter and the tuning read and write through here (so none of them needs
another's internals).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml
from pydantic import ValidationError

from ..rundir import is_run_dir, read_json
from ..scenario import Scenario
from .spec import Cell, Study


def tuned_path(study_path: Path) -> Path:
    """Where ``study tune`` writes the chosen α of a study: next to the study file."""
    return study_path.with_name(f"{study_path.stem}.tuned.yaml")


def cell_dir(study_dir: Path, cell: Cell, seed: int) -> Path:
    return Path(study_dir) / "runs" / cell.id / f"seed-{seed}"


def latest_run(parent: Path) -> Optional[Path]:
    """The newest run directory under ``parent`` (names end in a timestamp), or None."""
    runs = sorted((p for p in parent.glob("*") if is_run_dir(p)), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def same_scenario(recorded: dict, scenario: Scenario) -> bool:
    """Whether a run's recorded (resolved) scenario is ``scenario``, apart from its ``name`` (a label:
    it names the run directory and nothing else, so one study can take another's runs of the very
    same experiment — see ``results.import_runs``). The recorded one is resolved again through
    today's schema first, so a key added since, at its default, does not count as a change (old runs
    stay valid); a key the schema no longer knows does."""
    want = {**scenario.to_dict(), "name": None}
    if {**recorded, "name": None} == want:
        return True
    try:
        return {**Scenario.model_validate(recorded).to_dict(), "name": None} == want
    except ValidationError:
        return False


def done_run(parent: Path, scenario: Scenario) -> Optional[Path]:
    run = latest_run(parent)
    if run is None or read_json(run, "summary.json").get("status") != "complete":
        return None
    same = same_scenario(yaml.safe_load((run / "scenario.yaml").read_text()) or {}, scenario)
    return run if same else None


def results_dir(results: Path, cell: Cell, seed: int) -> Path:
    """A cell × seed's compact result under a results directory (see ``analysis/compact.py``)."""
    return Path(results) / "runs" / cell.id / f"seed-{seed}"


def compact_done(results: Optional[Path], cell: Cell, seed: int, scenario: Scenario) -> Optional[Path]:
    """The committed compact result of this cell × seed, if it is complete and of ``scenario``."""
    if results is None:
        return None
    d = results_dir(results, cell, seed)
    if not (d / "scenario.yaml").is_file() or read_json(d, "summary.json").get("status") != "complete":
        return None
    return d if same_scenario(yaml.safe_load((d / "scenario.yaml").read_text()) or {}, scenario) else None


def complete_run(sdir: Optional[Path], results: Optional[Path], cell: Cell, seed: int,
                 scenario: Scenario) -> Optional[Path]:
    """A complete run of ``scenario`` for this cell × seed: the latest run directory under the study
    directory ``sdir``, else the compact result in ``results`` (either may be None: not looked at)."""
    run = done_run(cell_dir(sdir, cell, seed), scenario) if sdir is not None else None
    return run or compact_done(results, cell, seed, scenario)


def status_entry(study: Study, cell: Cell, seed: int, **fields) -> dict:
    """A cell × seed's record in status.json (``status``, ``run``, ``error``, ``wall_time_s`` filled later)."""
    base = study.baseline_for(cell)
    return {"cell": cell.id, "label": cell.label, "seed": seed, "overrides": list(cell.overrides),
            "baseline": base.id if base else None,
            "reference": cell.reference.model_dump() if cell.reference else None,
            "status": "", "run": None, "error": None, "wall_time_s": None, **fields}


def recorded_path(run: Path, sdir: Path) -> str:
    """A run's path as status.json records it: relative to the study dir when inside it."""
    try:
        return str(run.relative_to(sdir))
    except ValueError:
        return str(run.resolve())
