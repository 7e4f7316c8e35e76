"""benchmarks/bn_study_anchors.py reads a study report's tables and gives the goal's verdict."""
from __future__ import annotations

import pandas as pd

from benchmarks import bn_study_anchors


def _report(tmp_path, ef_final: float):
    rep = tmp_path / "report"
    rep.mkdir(parents=True)
    rows = [("asgd", 0.80, 0.79, 0.81), ("adacomp c=0.01 ef", ef_final, ef_final - 0.01, ef_final + 0.01)]
    pd.DataFrame([{"label": lab, "seeds": 3, "final_acc_mean": m, "final_acc_min": lo, "final_acc_max": hi,
                   "best_acc_mean": m, "best_acc_min": lo, "best_acc_max": hi} for lab, m, lo, hi in rows]
                 ).to_csv(rep / "table.csv", index=False)
    pd.DataFrame([{"label": "asgd", "target": 0.75, "reached": 3, "seeds": 3, "ingress_ratio": 1.0, "ratio_min": 1.0,
                   "ratio_max": 1.0, "bytes_per_update_factor": 1.0, "updates_factor": 1.0},
                  {"label": "adacomp c=0.01 ef", "target": 0.75, "reached": 2, "seeds": 3, "ingress_ratio": 40.0,
                   "ratio_min": 30.0, "ratio_max": 55.0, "bytes_per_update_factor": 50.0, "updates_factor": 1.25}]
                 ).to_csv(rep / "targets-75.csv", index=False)
    return tmp_path


def test_the_verdict_follows_the_gap_to_tuned_asgd(tmp_path):
    a = bn_study_anchors.answer(_report(tmp_path / "near", 0.796))
    assert a["goal"]["cells"]["adacomp c=0.01 ef"]["met"]      # 0.4 point below: within 0.5
    b = bn_study_anchors.answer(_report(tmp_path / "far", 0.79))
    assert not b["goal"]["cells"]["adacomp c=0.01 ef"]["met"]   # 1.0 point below
    md = bn_study_anchors.markdown(b)
    assert "40.0× [30.0–55.0]" in md and "2/3" in md and "-1.0 points — not met" in md
