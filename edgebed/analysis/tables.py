"""The report's tables: run summaries in human units as markdown, and as CSV with numbers.

Markdown is for people (``12.34`` MB, ``97.85`` %, ``191.3×``, and words where there is no number:
``not reached``, ``no evals``); the CSV keeps the same rows as plain numbers with the unit in the
column name (empty cell = no value) so studies and spreadsheets can aggregate them.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import pandas as pd

from ..atomic import replacing

from .metrics import RunSummary

MB = 1e6  # bytes
DASH = "—"


def mb(nbytes: Optional[float]) -> str:
    """Bytes as MB (10^6 bytes) with 2 decimals; what would print as ``0.00`` keeps 2 significant digits."""
    if nbytes is None:
        return DASH
    v = nbytes / MB
    return f"{v:.2g}" if 0 < v < 0.005 else f"{v:,.2f}"


def pct(fraction: float) -> str:
    """Accuracy fraction as a percentage with 2 decimals (0.9785 → ``97.85``)."""
    return DASH if math.isnan(fraction) else f"{100 * fraction:.2f}"


def times(ratio: float) -> str:
    """A ratio as ``191.3×``; small ratios keep two significant digits (``0.047×``)."""
    if math.isnan(ratio):
        return DASH
    return f"{ratio:,.1f}×" if ratio >= 1 else f"{ratio:.2g}×"


def _target_cell(r: RunSummary, value: str) -> str:
    if r.evals == 0:
        return "no evals"
    return "not reached" if r.updates_to_target is None else value


def summary_rows(runs: list[RunSummary], ratios: dict[str, float], baseline: Optional[str]) -> pd.DataFrame:
    """The summary table as display strings, one row per run, in the given order."""
    t = f"{100 * runs[0].target:g} %" if runs else "target"
    ratio_col = f"ingress ratio vs {baseline}" if baseline else "ingress ratio"
    baseline_missed = any(r.run == baseline and r.ingress_to_target is None for r in runs)
    rows = []
    for r in runs:
        ratio = times(ratios.get(r.run, math.nan))
        if r.run == baseline:
            ratio += " (baseline)"
        elif ratio == DASH and r.evals == 0:
            ratio = f"{DASH} (no evals)"
        elif ratio == DASH and r.ingress_to_target is None:
            ratio = f"{DASH} (target not reached)"
        elif ratio == DASH and baseline_missed:
            ratio = f"{DASH} (baseline did not reach target)"
        rows.append({
            "run": r.run,
            "algorithm": r.algorithm,
            "c": DASH if math.isnan(r.c) else f"{r.c:g}",
            "n": str(r.n) if r.n else DASH,
            "status": r.status,
            "final acc (%)": "no evals" if r.evals == 0 else pct(r.final_accuracy),
            "best acc (%)": "no evals" if r.evals == 0 else pct(r.best_accuracy),
            "updates": f"{r.updates:,}",
            "ingress (MB)": mb(r.ingress_bytes),
            f"updates to {t}": _target_cell(r, f"{r.updates_to_target or 0:,}"),
            f"ingress to {t} (MB)": _target_cell(r, mb(r.ingress_to_target)),
            ratio_col: ratio,
        })
        if baseline is None:  # a single run has nothing to be compared with
            del rows[-1][ratio_col]
    return pd.DataFrame(rows)


def summary_numbers(runs: list[RunSummary], ratios: dict[str, float],
                    baseline: Optional[str]) -> pd.DataFrame:
    """The summary table as numbers (for CSV): % rounded to 2 decimals, ratio to 1, MB exact (6)."""
    rows = []
    for r in runs:
        rows.append({
            "run": r.run, "algorithm": r.algorithm, "c": r.c,
            "n": r.n, "status": r.status,
            "evals": r.evals,
            "final_accuracy_pct": round(100 * r.final_accuracy, 2),
            "best_accuracy_pct": round(100 * r.best_accuracy, 2),
            "updates": r.updates,
            "ingress_mb": round(r.ingress_bytes / MB, 6),
            "ingress_bytes": r.ingress_bytes,
            "target_accuracy_pct": round(100 * r.target, 2),
            "updates_to_target": r.updates_to_target,
            "ingress_to_target_mb": None if r.ingress_to_target is None else round(r.ingress_to_target / MB, 6),
            "ingress_to_target_bytes": r.ingress_to_target,
            "wall_time_to_target_s": r.wall_time_to_target,
            "baseline": baseline,
            "ingress_ratio_vs_baseline": round(ratios.get(r.run, math.nan), 1),
        })
    return pd.DataFrame(rows).astype({"updates_to_target": "Int64", "ingress_to_target_bytes": "Int64"})


def class_rows(shares: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per run and speed class (display strings): applied updates, share, devices, rate ratio."""
    rows = []
    for run, df in shares.items():
        for _, s in df.iterrows():
            rows.append({
                "run": run, "speed class": s["speed_class"], "updates": f"{int(s['updates']):,}",
                "share (%)": f"{100 * s['share']:.1f}", "devices": str(int(s["devices"])),
                "updates/device": f"{s['updates_per_device']:,.1f}", "rate ratio": times(s["rate_ratio"]),
            })
    return pd.DataFrame(rows)


def _cell(v) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table; text columns left-aligned, the rest right-aligned."""
    cols = list(frame.columns)
    left = {"run", "algorithm", "status", "speed class"}
    head = "| " + " | ".join(_cell(c) for c in cols) + " |"
    rule = "|" + "|".join(":---" if c in left else "---:" for c in cols) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write ``frame`` as CSV atomically (a temporary name, then renamed)."""
    path = Path(path)
    with replacing(path) as tmp:
        frame.to_csv(tmp, index=False)
    return path
