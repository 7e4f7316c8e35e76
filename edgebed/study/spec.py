"""The study file's schema: what a study file may say, validated with errors that name the key.

See ``emulator/study.py`` for what a study is and ``scenarios/studies/README.md`` for the keys.
"""
from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..scenario import ScenarioError


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
