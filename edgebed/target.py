"""The first evaluation at which a run reached a target accuracy — one definition for the engine's
summary.json and the analysis reports."""
from __future__ import annotations

from typing import NamedTuple, Optional

import pandas as pd


class TargetHit(NamedTuple):
    """The first evaluation at which Θ reached the target accuracy."""
    update: int           # applied updates at that evaluation
    ingress_bytes: int    # cumulative PS ingress (all message types) up to that update
    wall_time: float      # seconds since the run started


def to_target(evals: pd.DataFrame, target: Optional[float]) -> Optional[TargetHit]:
    """First eval (in update order) whose accuracy is ≥ ``target``; None if never reached (or no target)."""
    if target is None or evals.empty:
        return None
    ev = evals.sort_values("update", kind="stable")
    hit = ev[ev["accuracy"] >= target]
    if hit.empty:
        return None
    row = hit.iloc[0]
    return TargetHit(int(row["update"]), int(row["ingress_bytes"]), float(row["wall_time"]))
