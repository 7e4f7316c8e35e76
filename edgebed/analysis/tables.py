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


def _is_missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def run_rows(per_run: pd.DataFrame, targets: list[float], window: int = 1, grouped: bool = False) -> pd.DataFrame:
    """The run report's summary table as display strings, one row per run (``targets.run_row`` frame):
    what it is, what it reached, what it cost, and the updates it needed to each target."""
    rows = []
    for r in per_run.to_dict("records"):
        no_evals = r["evals"] == 0
        row = {"run": r["run"]}
        if grouped:
            row["group"] = r["label"]
            row["seed"] = str(r["seed"])
        row.update({
            "algorithm": r["algorithm"],
            "c": DASH if _is_missing(r["c"]) else f"{r['c']:g}",
            "n": str(r["n"]) if r["n"] else DASH,
            "status": r["status"],
            "final acc (%)": "no evals" if no_evals else pct(r["final_accuracy"]),
            "best acc (%)": "no evals" if no_evals else pct(r["best_accuracy"]),
        })
        if window > 1:
            row[f"best of {window}-eval moving avg (%)"] = "no evals" if no_evals else pct(r["smoothed_best"])
        row["updates"] = f"{r['updates']:,}"
        row["ingress (MB)"] = mb(r["ingress_bytes"])
        for t in targets:
            u = r[f"updates_to_{100 * t:g}"]
            row[f"updates to {100 * t:g} %"] = ("no evals" if no_evals else "not reached" if _is_missing(u)
                                                else f"{int(u):,}")
        rows.append(row)
    return pd.DataFrame(rows)


def records(frame: pd.DataFrame) -> list[dict]:
    """The rows of ``frame`` for strict JSON: numpy scalars as Python numbers, NaN / NA as None."""
    import json
    return json.loads(frame.to_json(orient="records", double_precision=15))


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
    left = {"run", "runs", "cell", "group", "seed", "algorithm", "status", "speed class", "setting", "value", "uplink",
            "downlink", "host", "numerics", "model · data", "stop", "started", "runtime"}
    if cols and cols[0] == "setting":   # a table of settings: text throughout
        left = set(cols)
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
