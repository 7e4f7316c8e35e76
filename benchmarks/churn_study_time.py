"""Virtual time to target and realised availability per cell of the churn study, from its committed
compact runs (``benchmarks/results/studies/churn/runs/<cell>/seed-<s>/{evals.csv,summary.json}``):
what the study report's update- and ingress-based tables leave out — devices away stretch the clock.

    python -m benchmarks.churn_study_time [results dir]   # writes <dir>/report/virtual_time.csv and .md
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

TARGETS = (0.80, 0.85, 0.88)


def per_run(results: Path) -> pd.DataFrame:
    rows = []
    for summary in sorted(results.glob("runs/*/seed-*/summary.json")):
        run = summary.parent
        s = json.loads(summary.read_text())
        ev = pd.read_csv(run / "evals.csv")
        dyn = s["fidelity"].get("dynamics", {})
        avail = (dyn.get("availability") or [{}])[0]
        row = {"cell": run.parent.name, "seed": int(run.name.split("-")[1]),
               "virtual_s_total": round(float(ev["virtual_time"].max()), 1),
               "realised_online": avail.get("realised_online", 1.0),
               "expected_online": avail.get("expected_online", 1.0)}
        for t in TARGETS:
            hit = ev[ev["accuracy"] >= t]
            row[f"virtual_s_to_{int(t * 100)}"] = round(float(hit["virtual_time"].iloc[0]), 1) if len(hit) else None
        rows.append(row)
    return pd.DataFrame(rows)


def per_cell(runs: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in runs.columns if c not in ("cell", "seed")]
    out = runs.groupby("cell", sort=False)[cols].mean().round(3)
    out.insert(0, "seeds", runs.groupby("cell", sort=False)["seed"].count())
    return out


def _markdown(table: pd.DataFrame) -> str:
    head = ["cell", *table.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join([":---"] + ["---:"] * len(table.columns)) + "|"]
    for cell, row in table.iterrows():
        lines.append("| " + " | ".join([cell, *("—" if pd.isna(v) else f"{v:g}" for v in row)]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    results = Path((argv or sys.argv[1:] or ["benchmarks/results/studies/churn"])[0])
    runs = per_run(results)
    table = per_cell(runs)
    out = results / "report"
    out.mkdir(exist_ok=True)
    table.to_csv(out / "virtual_time.csv")
    (out / "virtual_time.md").write_text(
        "# Churn study: virtual time to target and realised availability (means over seeds)\n\n"
        "From the committed compact runs (evals.csv: the first evaluation at or above the target; "
        "summary.json: fidelity.dynamics.availability). `python -m benchmarks.churn_study_time`.\n\n"
        + _markdown(table) + "\n")
    print(table.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
