"""What a run says about trust in its result: which device moved Θ most, and evaluations not finite.

The PS counts per device how far its applied pushes moved Θ (``DeviceState.moved``: the sum over its
pushes of the largest entry each moved, |value| × the rule's step scale) and its refused pushes. A run
that fails names the device that moved Θ most — a poisoner moves it far more than the devices it
drives to failure, which are merely the first to exit — and every summary carries the counts
(``harm``). An evaluation whose loss (or accuracy) is NaN or ±Inf means Θ does not compute a model
(a running variance below zero, statistics poisoned): it is an event, and the run is not complete.
"""
from __future__ import annotations

import math
import statistics


def harm(ps) -> dict:
    """summary.json's ``harm``: the device that moved Θ most, its sum and the median device's (units of
    Θ's entries, summed over pushes), the five largest movers and the devices with refused pushes."""
    with ps.lock:
        moved = {d: st.moved for d, st in ps.devices.items()}
        refused = {d: st.refused for d, st in ps.devices.items() if st.refused}
        robust = getattr(ps, "robust", None)
        clipped = dict(robust.clipped) if robust is not None else None
    if not moved:
        return {}
    top = max(moved, key=lambda d: moved[d])
    ranked = sorted(moved.items(), key=lambda kv: -kv[1])[:5]
    return {"moved_most": top, "moved": _round(moved[top]), "median_moved": _round(statistics.median(moved.values())),
            "largest": {str(d): _round(v) for d, v in ranked},
            "refused_pushes": {str(d): n for d, n in sorted(refused.items(), key=lambda kv: -kv[1])[:5]},
            **({"clipped_pushes": {str(d): n for d, n in sorted(clipped.items(), key=lambda kv: -kv[1])[:5]}}
               if clipped is not None else {})}


def blame(h: dict) -> str:
    """The sentence a failed run's reason carries: who moved Θ most, against the median device."""
    if not h:
        return "no push was applied"
    med = h["median_moved"]
    times = f", {h['moved'] / med:.3g} × the median device's {med:.3g}" if med > 0 else ""
    return f"device {h['moved_most']} moved Θ most (its pushes moved entries by {h['moved']:.3g} in all{times})"


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def not_finite(row: dict) -> bool:
    """Whether an evaluation row's loss or accuracy is NaN or ±Inf."""
    return not (math.isfinite(row["loss"]) and math.isfinite(row["accuracy"]))


def not_finite_detail(row: dict) -> str:
    return (f"the evaluation at update {row['update']} gave loss {row['loss']} (accuracy {row['accuracy']:.3g}): "
            "Θ does not compute a finite loss (e.g. a running variance below zero)")


def not_finite_reason(rows: list[dict]) -> str:
    """A failed run's reason when evaluations were not finite."""
    first = min(rows, key=lambda r: r["update"])
    return f"evaluation not finite: {not_finite_detail(first)}; {len(rows)} evaluation(s) so"
