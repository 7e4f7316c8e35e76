"""The Spark papers' smoke studies (SparkNet, DeepSpark, dynamic averaging) run on the virtual clock's
datacenter profile, and benchmarks/spark_figs.py reads the paper's figures from their results."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import spark_figs
from edgebed.study.runner import load_study, run_study

STUDIES = Path(__file__).resolve().parents[2] / "scenarios" / "studies"


def _run(name: str, tmp_path: Path) -> Path:
    study = load_study(STUDIES / f"{name}.yaml")
    results = tmp_path / "results" / name
    status = run_study(study, tmp_path / "out", results=results)
    assert status["complete"] == status["total"] == len(study.cells)
    return results


def _section(results: Path) -> tuple[str, dict]:
    report = results / "report"
    md = (report / "report.md").read_text()
    assert md.count("What carries over and what cannot") == 1      # appended once, below the study report
    assert (report / "paper.md").read_text().splitlines()[0].startswith("# ")
    assert any(p.name.startswith("paper_") and p.stat().st_size > 0 for p in report.glob("*.png"))
    return md, json.loads((report / "paper.json").read_text())


@pytest.mark.timeout(600)
def test_sparknet_smoke_reads_speedups_and_the_clock_agrees_with_the_model(tmp_path):
    results = _run("sparknet-figs-smoke", tmp_path)
    spark_figs.sparknet(results)
    md, data = _section(results)
    assert data["fig3"]["K=1 tau=1"] == [1.0]                 # the baseline against itself
    assert all(not math.isnan(v[0]) for v in data["fig3"].values())
    # measured at S = 20 s = the model's (τC + S)·M_a, to the step jitter
    _, cells = spark_figs.load(results)
    s20, s0 = cells["K=2 tau=4 S=20s"], cells["K=2 tau=4"]
    rounds = float(s0.at(1, 0.8)["update"]) / 2
    assert s20.time(1, 0.8) == pytest.approx(s0.time(1, 0.8) + rounds * 20.0, rel=1e-6)
    # Fig. 4: the paper's naive formula collapses with S; SparkNet's best τ moves up
    naive = data["fig4"]["naive_paper"]
    assert naive[0] == pytest.approx(2.0) and naive[-1] < 0.05
    assert data["fig4"]["best_tau"][-1] == [4]
    assert "| 2 |" in md and "Fig. 4" in md


@pytest.mark.timeout(600)
def test_deepspark_smoke_reads_the_papers_ratios(tmp_path):
    results = _run("deepspark-smoke", tmp_path)
    spark_figs.deepspark(results)
    md, data = _section(results)
    r = data["ratios"]["S=10s"]
    assert set(r) == {"one/easgd", "fixed/loss-driven", "sync/easgd", "steps easgd/sync"}
    assert all(v > 0 for v in r["one/easgd"] + r["sync/easgd"])
    easgd = data["cells"]["easgd period=10 S=10s"]
    # fixed period 10: exchanges ≈ steps / 10 per worker (the last period may be under way at the stop)
    assert easgd["steps_per_worker"][0] * 4 / 10 == pytest.approx(easgd["exchanges"][0], abs=4)
    assert "2.50×" in md and "6.00×" in md                       # the paper's ratios, beside ours


@pytest.mark.timeout(600)
def test_dynamic_smoke_needs_fewer_bytes_than_periodic(tmp_path):
    results = _run("dynamic-averaging-scaling-smoke", tmp_path)
    spark_figs.dynamic(results)
    md, data = _section(results)
    for k in ("2", "3"):
        dyn, per = data["dynamic"][k], data["periodic"][k]
        assert dyn["rule"][0]["syncs"] < dyn["rule"][0]["rounds"]
        assert dyn["ingress_mb"][0] < per["ingress_mb"][0]
    assert "7.15" in md
