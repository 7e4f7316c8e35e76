"""Metrics of a run: pure functions from its tables (pandas DataFrames) to the numbers a report shows.

Units: bytes are bytes (never MB here; ``tables`` converts), accuracy is a fraction in [0, 1],
times are seconds. A missing value is ``None`` (no such event) or NaN (no data), never 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from ..emulator.fidelity import class_shares  # noqa: F401  (re-exported: part of the metrics API)
from ..algorithms import own_keys
from ..target import TargetHit, to_target  # noqa: F401  (re-exported: part of the metrics API)


@dataclass(frozen=True)
class RunSummary:
    """One row of the report table: what a run achieved and what it cost at the PS."""
    run: str                      # run dir name (unique among the compared runs)
    algorithm: str
    c: float                      # compression ratio (fraction of entries sent); NaN if unknown
    n: int                        # workers; 0 if unknown
    status: str                   # running | complete | incomplete | failed | unknown
    evals: int                    # evaluations recorded
    final_accuracy: float         # NaN when there are no evals
    best_accuracy: float
    updates: int                  # applied updates
    ingress_bytes: int            # total PS ingress in bytes
    target: float
    updates_to_target: Optional[int]     # None: target not reached
    ingress_to_target: Optional[int]     # bytes; None: target not reached
    wall_time_to_target: Optional[float]


def _by_update(evals: pd.DataFrame) -> pd.DataFrame:
    return evals.sort_values("update", kind="stable")


def moving_average(evals: pd.DataFrame, window: int) -> pd.DataFrame:
    """The evals in update order with ``smoothed``: the mean accuracy of each evaluation and the
    ``window − 1`` before it (trailing, so it uses no later evaluation; NaN for the first
    ``window − 1``). ``window = 1`` is the raw curve."""
    ev = _by_update(evals).reset_index(drop=True)
    ev["smoothed"] = ev["accuracy"].rolling(window, min_periods=window).mean()
    return ev


def smoothed_to_target(evals: pd.DataFrame, target: float, window: int) -> Optional[TargetHit]:
    """First evaluation at which the moving average (``moving_average``) is ≥ ``target``: the paper's
    accuracy-to-target on a smoothed curve. Its update and ingress are those of that evaluation."""
    ev = moving_average(evals, window)
    hit = ev[ev["smoothed"] >= target]
    if hit.empty:
        return None
    row = hit.iloc[0]
    return TargetHit(int(row["update"]), int(row["ingress_bytes"]), float(row["wall_time"]))


def smoothed_best(evals: pd.DataFrame, window: int) -> float:
    """The paper's "final" accuracy of a run: the maximum of the moving average; NaN when there
    are fewer than ``window`` evaluations."""
    s = moving_average(evals, window)["smoothed"].dropna()
    return float(s.max()) if not s.empty else math.nan


def smoothed_final(evals: pd.DataFrame, window: int) -> float:
    """The moving average at the last evaluation (mean of the last ``window``); NaN if too few."""
    s = moving_average(evals, window)["smoothed"]
    return float(s.iloc[-1]) if len(s) and not math.isnan(s.iloc[-1]) else math.nan


def final_accuracy(evals: pd.DataFrame) -> float:
    """Accuracy at the last evaluation (highest update); NaN with no evals."""
    if evals.empty:
        return math.nan
    return float(_by_update(evals)["accuracy"].iloc[-1])


def best_accuracy(evals: pd.DataFrame) -> float:
    """Highest accuracy over all evaluations; NaN with no evals."""
    return math.nan if evals.empty else float(evals["accuracy"].max())


def applied_updates(updates: pd.DataFrame, evals: pd.DataFrame, summary: dict) -> int:
    """Applied updates: the highest index seen in either table, or the summary's count if larger."""
    seen = [int(t["update"].max()) for t in (updates, evals) if not t.empty]
    claimed = summary.get("updates")
    if isinstance(claimed, (int, float)) and not isinstance(claimed, bool):
        seen.append(int(claimed))
    return max(seen, default=0)


def total_ingress(updates: pd.DataFrame, evals: pd.DataFrame, summary: dict) -> int:
    """Total PS ingress in bytes.

    The summary's ``ingress_bytes`` when the run wrote it (it counts every message to the end);
    otherwise the larger of the last eval's cumulative ingress (all message types, but only up to
    that eval) and the sum of push sizes (every push, but pushes only).
    """
    claimed = summary.get("ingress_bytes")
    if isinstance(claimed, (int, float)) and not isinstance(claimed, bool):
        return int(claimed)
    last_eval = int(evals["ingress_bytes"].max()) if not evals.empty else 0
    pushes = int(updates["bytes_in"].sum()) if not updates.empty else 0
    return max(last_eval, pushes)


def summarize(run: str, scenario: dict, summary: dict, updates: pd.DataFrame,
              evals: pd.DataFrame, target: float) -> RunSummary:
    """The report row of one run from its resolved scenario, summary.json and tables."""
    algo = own_keys(scenario.get("algorithm") or {})   # c only where the rule compresses
    workers = scenario.get("workers") or {}
    hit = to_target(evals, target)
    return RunSummary(
        run=run,
        algorithm=str(algo.get("name", "unknown")),
        c=float(algo["c"]) if isinstance(algo.get("c"), (int, float)) else math.nan,
        n=int(workers.get("n") or 0),
        status=str(summary.get("status", "unknown")),
        evals=len(evals),
        final_accuracy=final_accuracy(evals),
        best_accuracy=best_accuracy(evals),
        updates=applied_updates(updates, evals, summary),
        ingress_bytes=total_ingress(updates, evals, summary),
        target=target,
        updates_to_target=hit.update if hit else None,
        ingress_to_target=hit.ingress_bytes if hit else None,
        wall_time_to_target=hit.wall_time if hit else None,
    )


def ingress_ratio(baseline_bytes: Optional[int], run_bytes: Optional[int]) -> float:
    """How many times less PS ingress the run needed than the baseline: baseline / run.

    ``191.0`` means the run reached the target with 1/191 of the baseline's bytes. NaN when either
    did not reach the target (or the run needed no bytes at all).
    """
    if baseline_bytes is None or run_bytes is None or run_bytes <= 0:
        return math.nan
    return baseline_bytes / run_bytes


def ratios_vs(baseline: RunSummary, runs: list[RunSummary]) -> dict[str, float]:
    """Each run's ingress-to-target ratio against ``baseline`` (see ``ingress_ratio``), by run name."""
    return {r.run: ingress_ratio(baseline.ingress_to_target, r.ingress_to_target) for r in runs}


def band(frames: list[pd.DataFrame], x: str, y: str, points: int = 200,
         log: bool = False) -> pd.DataFrame:
    """Mean and min/max of ``y`` over several runs (seeds), on a common grid of ``x``.

    Each frame is interpolated linearly at the grid points. The grid spans only the x range that
    *every* frame covers, so each point of the band is computed from all seeds (a seed that
    stopped early narrows the range instead of silently dropping out). ``log`` spaces the grid
    geometrically (for ingress bytes); it then ignores x ≤ 0. Columns: ``x, mean, min, max, runs``.
    Empty when the frames share no range.
    """
    curves = []
    for f in frames:
        f = f[[x, y]].dropna().sort_values(x, kind="stable")
        if log:
            f = f[f[x] > 0]
        if not f.empty:
            curves.append((f[x].to_numpy(float), f[y].to_numpy(float)))
    empty = pd.DataFrame(columns=["x", "mean", "min", "max", "runs"])
    if not curves:
        return empty
    lo = max(cx[0] for cx, _ in curves)
    hi = min(cx[-1] for cx, _ in curves)
    if lo > hi:
        return empty
    grid = np.geomspace(lo, hi, points) if log and lo < hi else np.linspace(lo, hi, points)
    ys = np.vstack([np.interp(grid, cx, cy) for cx, cy in curves])
    return pd.DataFrame({"x": grid, "mean": ys.mean(axis=0), "min": ys.min(axis=0),
                         "max": ys.max(axis=0), "runs": len(curves)})
