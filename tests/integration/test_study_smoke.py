"""The three shipped smoke studies, run for real (sim runtime) and reported: files, cells and the numbers a user reads."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from edgebed.study.report import write_study_report
from edgebed.cli import main
from edgebed.study.runner import load_study, run_study

STUDIES = Path(__file__).resolve().parents[2] / "scenarios" / "studies"


def run_and_report(name: str, out: Path):
    study = load_study(STUDIES / f"{name}.yaml")
    status = run_study(study, out)
    assert status["complete"] + status["skipped"] == status["total"] == len(study.cells) * len(study.spec.seed_list)
    rep = write_study_report(out / study.spec.name)
    for f in rep.files:
        assert f.is_file() and f.stat().st_size > 0, f
    assert set(rep.plots) >= {"accuracy_vs_updates", "accuracy_vs_ingress"}
    table = pd.read_csv(rep.table_csv).set_index("label")
    assert list(table.index) == [c.label for c in study.cells]
    assert (table["best_acc_mean"] > 0.2).all()          # every cell learned something
    for cell in study.cells:
        assert f"| {cell.label} |" in rep.table_markdown
    assert rep.html.read_text().count("data:image/png;base64,") >= 2
    return study, rep, table


def test_compression_smoke_compressed_cells_need_less_ingress(tmp_path):
    _, rep, t = run_and_report("compression-smoke", tmp_path)
    assert t.loc["asgd", "ingress_ratio_vs_baseline"] == 1.0
    per_update = t["ingress_mean"] / 300
    assert per_update["adacomp c=0.01"] < per_update["adacomp c=0.1"] < per_update["asgd"]
    assert per_update["comp-asgd c=0.01"] < per_update["comp-asgd c=0.1"] < per_update["asgd"]
    reached = t[t["reached_target"] > 0]
    assert "asgd" in reached.index and (reached["ingress_ratio_vs_baseline"] > 0).all()


def test_crash_smoke_reports_crashes_only_where_asked_and_resumes(tmp_path, capsys):
    assert main(["study", "run", str(STUDIES / "crashes-smoke.yaml"), "--out", str(tmp_path)]) == 0
    assert "[3/3]" in capsys.readouterr().err
    _, rep, t = run_and_report("crashes-smoke", tmp_path)     # a second invocation: all skipped
    assert capsys.readouterr().err == ""
    status = (tmp_path / "crashes-smoke" / "status.json").read_text()
    assert status.count('"status": "skipped"') == 3
    crash = [c for c in t.index if "crash p=" in c]
    calm = [c for c in t.index if "no crash" in c]
    assert len(crash) == 1 and len(calm) == 2
    assert (t.loc[crash, "crashed_mean"] > 0).all() and (t.loc[crash, "crashed_mean"] < 8).all()
    assert (t.loc[calm, "crashed_mean"] == 0).all()
    assert "crashed" in rep.table_markdown.splitlines()[0]


def test_heterogeneity_smoke_fast_class_has_the_largest_share(tmp_path):
    _, rep, _ = run_and_report("heterogeneity-smoke", tmp_path)
    classes = pd.read_csv(rep.classes_csv)
    assert set(classes["cell"]) == {"100:10:1"}
    shares = classes.set_index("speed_class")["share_mean"]
    assert shares.idxmax() == "fast" and shares["fast"] > shares["medium"] > shares["slow"] > 0
    ratio = classes.set_index("speed_class")["rate_ratio_mean"]
    assert ratio["fast"] > ratio["medium"] > ratio["slow"] == 1.0
    assert "Applied updates per speed class" in rep.html.read_text()


def test_beyond_adacomp_smoke_new_compressors_need_less_ingress(tmp_path):
    _, rep, t = run_and_report("beyond-adacomp-smoke", tmp_path)
    per_update = t["ingress_mean"] / 300
    # the same AdaComp pushes packed as varint + bf16 + zstd: under 40 % of v1's bytes
    assert per_update["adacomp c=0.01 compact"] < 0.4 * per_update["adacomp c=0.01"]
    # error feedback at c = 0.001 and q8 values: smaller again
    assert per_update["ef per-layer c=0.001"] < 0.3 * per_update["adacomp c=0.01 compact"]
    assert per_update["ef per-layer c=0.01 q8"] < per_update["adacomp c=0.01 compact"]
    reached = t[t["reached_target"] > 0]
    assert "asgd lr=0.1" in reached.index and "ef per-layer c=0.001" in reached.index


@pytest.mark.parametrize("name", ["compression", "crashes", "heterogeneity", "beyond-adacomp"])
def test_full_studies_are_valid(name):
    study = load_study(STUDIES / f"{name}.yaml")
    sc = study.scenario(study.cells[0], 1)
    assert sc.runtime.name == "sim" and sc.stop.updates == 250_000 and sc.model.name == "cnn"
