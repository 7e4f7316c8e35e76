"""The three shipped smoke studies, run for real (sim runtime) and reported: files, cells and the numbers a user reads."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from edgebed.study.report import write_study_report
from edgebed.cli import main
from edgebed.study.runner import load_study, run_study
from edgebed.study.tuning import tuning_study
from tests.capabilities import require

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


def test_tuned_smoke_tunes_on_validation_then_runs_at_the_chosen_alpha(tmp_path):
    # a copy beside a copy of the base scenario: `study tune` writes next to the study file
    (tmp_path / "studies").mkdir()
    shutil.copy(STUDIES.parent / "paper-fig3-adacomp.yaml", tmp_path)
    path = tmp_path / "studies" / "compression-tuned-smoke.yaml"
    shutil.copy(STUDIES / path.name, path)
    assert main(["study", "tune", str(path), "--out", str(tmp_path / "out"),
                 "--results", str(tmp_path / "res-tuning")]) == 0
    chosen = yaml.safe_load(path.with_name("compression-tuned-smoke.tuned.yaml").read_text())["chosen"]
    assert set(chosen) == {"asgd", "adacomp c=0.01"} and set(chosen.values()) <= {0.01, 0.1}
    table = pd.read_csv(path.with_name("compression-tuned-smoke.tuning.csv"))
    assert len(table) == 4 and table["score"].between(0.05, 1).all()
    assert main(["study", "run", str(path), "--out", str(tmp_path / "out"), "--results", str(tmp_path / "res")]) == 0
    rep = write_study_report(tmp_path / "res")                 # from the compact results alone
    runs = pd.read_csv(rep.runs_csv).set_index("label")
    for label, lr in chosen.items():
        assert yaml.safe_load((tmp_path / "res" / "runs" / runs.loc[label, "cell"] / "seed-1" /
                               "scenario.yaml").read_text())["algorithm"]["lr"] == lr
    assert (rep.out_dir / "targets-30.csv").is_file() and "## To 30 %" in rep.markdown.read_text()


def test_crashes_paper_smoke_is_the_mlp_on_a_reduced_set_with_crash_times(tmp_path):
    study, rep, t = run_and_report("crashes-paper-smoke", tmp_path)
    assert study.scenario(study.cells[2], 1).dataset.train_samples == 160
    runs = pd.read_csv(rep.runs_csv).set_index("label")
    crashed = runs.loc["n=8 crash p=0.01"]
    assert 0 < crashed["crashed"] < 8 and len(str(crashed["crash_updates"]).split()) == crashed["crashed"]
    assert runs["tau_mean"].notna().all() and runs["paper_bytes_per_update"].gt(0).all()


def _require_fashion() -> None:
    require(Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists(), "Fashion-MNIST",
            "make provision installs dataset-fashion-mnist")


def test_fashion_smoke_runs_on_fashion_mnist(tmp_path):
    _require_fashion()
    study, rep, t = run_and_report("compression-fashion-smoke", tmp_path)
    assert study.scenario(study.cells[0], 1).dataset.name == "fashion-mnist"
    assert t.loc["adacomp c=0.01", "ingress_mean"] < t.loc["asgd", "ingress_mean"] / 20


@pytest.mark.parametrize("name,model,n_per_device", [("crashes-paper", "mlp", 8), ("compression-fashion", "cnn", 300)])
def test_paper_protocol_studies_are_valid(name, model, n_per_device):
    study = load_study(STUDIES / f"{name}.yaml")
    sc = study.scenario(study.cells[0], 1)
    assert sc.model.name == model and sc.stop.updates == 250_000
    train = sc.dataset.train_samples or 60_000
    assert train // sc.workers.n == n_per_device


def test_compression_tuned_declares_its_tuning():
    study = load_study(STUDIES / "compression-tuned.yaml")
    t = study.spec.tuning
    assert t.lr[0] == 0.003 and t.lr[-1] == 1.0 and t.validation_samples > 0
    assert len(tuning_study(study).cells) == len(study.cells) * len(t.lr)


def test_churn_smoke_devices_away_slow_the_clock_not_the_bytes_per_update(tmp_path):
    """Churn (online 1/3 of the time) stretches the virtual time 400 updates take, and the realised
    online fraction sits near the configured one; the bytes per update stay the rule's."""
    _, _, t = run_and_report("churn-smoke", tmp_path)

    def run(cell):
        return next((tmp_path / "churn-smoke" / "runs").glob(f"{cell}/seed-1/*/summary.json")).parent
    for rule in ("asgd", "adacomp"):
        calm, away = run(f"{rule}-always-online"), run(f"{rule}-online-1-3")
        assert "dynamics" not in json.loads((calm / "summary.json").read_text())["fidelity"]
        dyn = json.loads((away / "summary.json").read_text())["fidelity"]["dynamics"]
        calm_s = pd.read_csv(calm / "evals.csv")["virtual_time"].max()
        assert pd.read_csv(away / "evals.csv")["virtual_time"].max() > 1.5 * calm_s, (dyn, calm_s)
        avail = dyn["availability"][0]
        assert 0.25 < avail["realised_online"] < 0.5 and avail["expected_online"] == pytest.approx(1 / 3, abs=1e-3)
        assert t.loc[f"{rule} online 1/3", "ingress_mean"] == pytest.approx(
            t.loc[f"{rule} always online", "ingress_mean"], rel=0.1)
    assert t.loc["adacomp online 1/3", "ingress_mean"] < 0.2 * t.loc["asgd online 1/3", "ingress_mean"]


def test_bn_adacomp_smoke_trains_the_batchnorm_resnet_on_fashion_mnist(tmp_path):
    _require_fashion()
    from edgebed.rundir import read_table
    study = load_study(STUDIES / "bn-adacomp-smoke.yaml")
    status = run_study(study, tmp_path)
    assert status["complete"] == status["total"] == 2
    rep = write_study_report(tmp_path / study.spec.name)
    t = pd.read_csv(rep.table_csv).set_index("label")
    sc = study.scenario(study.cells[1], 1)
    assert sc.model.name == "resnet20" and sc.model.args["depth"] == 8 and sc.compression.error_feedback
    assert t.loc["adacomp c=0.01 ef", "ingress_mean"] < t.loc["asgd", "ingress_mean"] / 20
    # Every cell learns: the devices' training loss falls from chance (ln 10 = 2.30), and the accuracy
    # recorded with statistics recomputed for the evaluated weights (model.buffers: auto) is well above
    # chance (with the initial statistics, as before issue 38, it stayed at ~11 %).
    assert (t["best_acc_mean"] > 0.3).all(), t["best_acc_mean"]
    runs = sorted((tmp_path / study.spec.name / "runs").glob("*/seed-1/*/"))
    assert len(runs) == 2
    for run in runs:
        loss = read_table(run, "updates")["loss"]
        assert loss.head(50).mean() > 2.2 and loss.tail(50).mean() < 2.05, run
