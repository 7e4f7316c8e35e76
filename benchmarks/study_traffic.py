"""Per-cell traffic of a study, both directions: what the study report's ingress table leaves out.

    python -m benchmarks.study_traffic <study dir> [--out FILE.csv]   (default <study dir>/report/traffic.csv)

One row per cell × seed from each run's traffic.json, summary.json and evals table: applied updates,
PS ingress and egress (bytes), push bytes per applied update, model bytes per pull, final and best
test accuracy. Compressed pulls show up in ``model_bytes_per_pull`` and ``egress_bytes``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from edgebed.rundir import read_json, read_table


def rows(study_dir: Path) -> list[dict]:
    status = json.loads((study_dir / "status.json").read_text())
    out = []
    for cell in status["cells"]:
        if cell.get("status") not in ("complete", "skipped") or not cell.get("run"):
            continue
        run = study_dir / cell["run"]
        traffic, summary = read_json(run, "traffic.json"), read_json(run, "summary.json")
        evals = read_table(run, "evals")
        updates = summary["updates"]
        model = traffic["by_kind"].get("model", {"out_bytes": 0, "out_msgs": 0})
        out.append({"label": cell["label"], "seed": cell["seed"], "updates": updates,
                    "ingress_bytes": traffic["ingress_bytes"], "egress_bytes": traffic["egress_bytes"],
                    "push_bytes_per_update": traffic["push_bytes"] / max(updates, 1),
                    "model_bytes_per_pull": model["out_bytes"] / max(model["out_msgs"], 1),
                    "final_accuracy": float(evals["accuracy"].iloc[-1]) if len(evals) else float("nan"),
                    "best_accuracy": float(evals["accuracy"].max()) if len(evals) else float("nan")})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("study_dir")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    study = Path(args.study_dir)
    out = Path(args.out) if args.out else study / "report" / "traffic.csv"
    df = pd.DataFrame(rows(study))
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    print(df.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
