"""The study file's schema: what a study file may say, validated with errors that name the key.

See ``emulator/study.py`` for what a study is and ``scenarios/studies/README.md`` for the keys.
"""
from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..scenario import Scenario, ScenarioError, parse_scenario


class StudyError(ScenarioError):
    """A study that can't be used: says which file, which key and what to do."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Reference(_Strict):
    """Published numbers for a cell (e.g. the paper's), printed next to ours by ``study report``."""
    final_accuracy: Optional[float] = Field(None, gt=0, le=1, description="a fraction")
    ingress_ratio: Optional[float] = Field(None, gt=0, description="baseline's ingress to target / the cell's")


class CellSpec(_Strict):
    label: Optional[str] = None
    set: dict[str, Any] = Field(default_factory=dict, description="dotted scenario key → value")
    reference: Optional[Reference] = None
    baseline: Optional[str] = Field(None, description="this cell's baseline, instead of the study's")


class TuningSpec(_Strict):
    """How ``edgebed study tune`` picks α for each cell: a log grid on a short horizon, scored on a
    validation split carved from the training data (never the test set)."""
    lr: list[float] = Field(default_factory=lambda: [0.003, 0.01, 0.03, 0.1, 0.3, 1.0], min_length=2)
    updates: int = Field(..., ge=1, description="the short horizon: applied updates per tuning run")
    eval_every: int = Field(..., ge=1)
    validation_samples: int = Field(..., ge=1, description="last N training samples held out")
    seeds: list[int] = Field(default_factory=lambda: [1], min_length=1)
    rule: Literal["final-smoothed", "best-smoothed"] = Field(
        "final-smoothed", description="score: the moving average of validation accuracy at the "
        "horizon, or its maximum; mean over the tuning seeds; the highest wins, ties the smaller α")
    window: int = Field(5, ge=1, description="moving-average window, in evaluations")


class DenseEvalSpec(_Strict):
    """Evaluate every ``every`` updates near the study's targets (sets ``eval.dense`` in every cell)."""
    within: float = Field(0.01, gt=0, le=1, description="accuracy points (a fraction) around a target")
    every: int = Field(..., ge=1, description="must divide the cells' eval.every")


class StudySpec(_Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    base: str = Field(..., description="base scenario file, relative to the study file")
    set: dict[str, Any] = Field(default_factory=dict)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    cells: list[CellSpec] = Field(default_factory=list)
    seeds: Union[int, list[int]] = 3
    target: float = Field(0.97, gt=0, le=1, description="target test accuracy, a fraction")
    baseline: Optional[str] = None
    reference_source: str = Field("", description="where the cells' reference numbers come from")
    targets: list[float] = Field(default_factory=list, description="more target accuracies for "
                                 "the per-target tables (fractions)")
    smoothing: int = Field(1, ge=1, description="moving-average window (evaluations) of the "
                           "accuracy curve that targets and 'best' are read from; 1: raw")
    protocol: str = Field("", description="how α was chosen, e.g. \"paper's single α\"; labels the report")
    tuning: Optional[TuningSpec] = None
    dense_eval: Optional[DenseEvalSpec] = Field(None, description="denser evaluation near target and targets")

    @field_validator("targets")
    @classmethod
    def _targets(cls, v):
        bad = [t for t in v if not 0 < t <= 1]
        if bad:
            raise ValueError(f"targets {bad} must be fractions in (0, 1], e.g. 0.94")
        return v

    @field_validator("sweep")
    @classmethod
    def _values(cls, v):
        for key, values in v.items():
            if not values:
                raise ValueError(f"sweep {key!r} has no values; give a list with at least one")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError("seeds must be ≥ 1 (a count) or a non-empty list of seeds")
        if isinstance(v, list) and (not v or len(set(v)) != len(v)):
            raise ValueError("seeds must be a non-empty list of distinct integers")
        return v

    @property
    def seed_list(self) -> list[int]:
        """A count N means seeds 1..N."""
        return list(range(1, self.seeds + 1)) if isinstance(self.seeds, int) else list(self.seeds)


def _format(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = ("unknown key; study keys are name, description, base, set, sweep, cells, seeds, "
                   "target, targets, smoothing, protocol, tuning, dense_eval, baseline, reference_source; a cell "
                   "has label, set, reference, baseline; tuning has lr, updates, eval_every, "
                   "validation_samples, seeds, rule, window (see scenarios/studies/README.md)")
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["loc"][-1] in ("final_accuracy", "target"):
            msg += "; give accuracy as a fraction (97.85 % → 0.9785)"
        lines.append(f"{source}: {loc}: {msg}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Cell:
    """One point of the study grid (all seeds of it share the cell)."""
    id: str                         # directory name, unique in the study
    label: str                      # legend / table label
    overrides: tuple[str, ...]      # ``key=value`` strings for scenario.apply_override
    group: str                      # label of the ``cells:`` entry ('' without cells); baseline matching
    sweep: str                      # label of the sweep point ('' without sweep)
    reference: Optional[Reference] = None   # published numbers for the cell, if the study gives them
    baseline: Optional[str] = None          # the cell's own baseline (label or group), if it names one


@dataclass(frozen=True)
class Study:
    spec: StudySpec
    path: Path                      # the study file
    base: dict                      # the base scenario as read
    base_path: Path
    cells: list[Cell]
    cli_set: tuple[str, ...] = ()
    only: Optional[frozenset] = None   # ids of the cells to run (``select``); None: all of them
    seeds_only: Optional[tuple] = None  # the seeds to run (``first_seeds``); None: all of them
    tuned: Optional[dict] = None       # cell label → α chosen by ``study tune`` (studies with tuning:)

    def scenario(self, cell: Cell, seed: int) -> Scenario:
        """The resolved scenario of one cell × seed: base → study set → cell → sweep → tuned α →
        seed → --set."""
        name = f"{self.spec.name}-{cell.id}-s{seed}"[:120]
        lr = (self.tuned or {}).get(cell.label)
        tuned = (f"algorithm.lr={lr!r}",) if lr is not None else ()
        overrides = (*cell.overrides, *tuned, f"seed={seed}", f"name={name}", *self.cli_set)
        try:
            return parse_scenario(self.base, str(self.base_path), overrides, notify=False)
        except ScenarioError as err:
            raise StudyError(f"{self.path}: cell {cell.label!r} (seed {seed}) does not give a valid "
                             f"scenario; fix its values under `set`/`sweep`/`cells`:\n{err}") from None

    def first_seeds(self, k: int) -> "Study":
        """The same study running only its first ``k`` seeds (a later full invocation resumes); the
        other seeds stay in status.json as they are on disk, so totals count the whole study."""
        if k < 1:
            raise StudyError(f"{self.path}: --seeds {k}: give at least 1")
        return dataclasses.replace(self, seeds_only=tuple(self.spec.seed_list[:k]))

    @property
    def run_seeds(self) -> list[int]:
        """The seeds this invocation runs (all of the study's, unless ``first_seeds``)."""
        return [s for s in self.spec.seed_list if self.seeds_only is None or s in self.seeds_only]

    def select(self, patterns: tuple[str, ...]) -> "Study":
        """The same study running only the cells whose label or id matches a glob in ``patterns``
        (baselines are still looked up among all cells; a later invocation without it resumes)."""
        chosen = frozenset(c.id for c in self.cells
                           if any(fnmatch.fnmatchcase(c.label, p) or fnmatch.fnmatchcase(c.id, p) for p in patterns))
        if not chosen:
            listed = "\n".join(f"  {c.label}   (id {c.id})" for c in self.cells)
            raise StudyError(f"{self.path}: --cells {' '.join(patterns)} matches no cell; the cells are:\n{listed}")
        return dataclasses.replace(self, only=chosen)

    def untuned(self) -> list[str]:
        """Labels of the selected cells that need a tuned α and have none."""
        if self.spec.tuning is None:
            return []
        return [c.label for c in self.selected if c.label not in (self.tuned or {})]

    @property
    def selected(self) -> list[Cell]:
        return [c for c in self.cells if self.only is None or c.id in self.only]

    def baseline_for(self, cell: Cell) -> Optional[Cell]:
        """The cell ``cell`` is compared with: the baseline cell at the same sweep point."""
        b = cell.baseline or self.spec.baseline
        if b is None:
            return None
        for c in self.cells:
            if c.label == b or (c.group == b and c.sweep == cell.sweep):
                return c
        return None
