"""Study protocols: tuning α on a validation split, committed compact results (resume + report
without run dirs, import of old runs), the resume check across new default keys, smoothed
multi-target tables with the ratio's two factors, two protocols side by side."""
from __future__ import annotations

import json
import math
from pathlib import Path
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from edgebed.analysis.metrics import moving_average, smoothed_best, smoothed_to_target
from edgebed.study.report import write_study_report
from edgebed.cli import main
from edgebed.data import Dataset, DatasetError, validation_split
from edgebed.study import runner as study_mod, storage
from edgebed.study.runner import StudyError, load_study, run_study
from edgebed.study.storage import tuned_path
from edgebed.study.results import import_runs, progress
from edgebed.study.tuning import tuning_study
from tests.unit.study.fakes import COMPRESSION, CURVES, FakeRunner, write_study

TUNING = {"lr": [0.01, 0.1, 1.0], "updates": 400, "eval_every": 100, "validation_samples": 50,
          "seeds": [1, 2], "rule": "final-smoothed", "window": 2}


class LrRunner(FakeRunner):
    """The fake run's accuracy is best at α = 0.1 for asgd and α = 0.01 for the others."""

    def __call__(self, sc, out, progress):
        best = 0.1 if sc.algorithm.name == "asgd" else 0.01
        penalty = 0.2 * abs(math.log10(sc.algorithm.lr / best))
        saved = dict(CURVES)
        try:
            for k, (per, accs) in saved.items():
                CURVES[k] = (per, [a - penalty for a in accs])
            return super().__call__(sc, out, progress)
        finally:
            CURVES.update(saved)


def test_tuning_runs_every_cell_at_every_alpha_on_validation_and_picks_by_the_rule(tmp_path, monkeypatch):
    path = write_study(tmp_path, tuning=TUNING, **COMPRESSION)
    study = load_study(path)
    with pytest.raises(StudyError, match="no tuned α yet .* run `edgebed study tune"):
        run_study(study, tmp_path / "out", FakeRunner())
    ts = tuning_study(study)
    assert len(ts.cells) == 9 and ts.spec.seed_list == [1, 2] and ts.spec.name == "st-tuning"
    sc = ts.scenario(ts.cells[0], 1)
    assert sc.dataset.validation_samples == 50 and sc.stop.updates == 400 and sc.algorithm.lr == 0.01
    monkeypatch.setattr(study_mod, "engine_runner", lambda source: LrRunner())
    assert main(["study", "tune", str(path), "--out", str(tmp_path / "out"),
                 "--results", str(tmp_path / "res-tuning")]) == 0
    tuned = yaml.safe_load(tuned_path(path).read_text())
    assert tuned["chosen"] == {"asgd": 0.1, "adacomp": 0.01, "comp-asgd": 0.01}
    assert tuned["rule"] == "final-smoothed" and tuned["not_complete"] == []
    table = pd.read_csv(tmp_path / "study.tuning.csv")
    assert len(table) == 18                                   # 3 cells × 3 α × 2 seeds
    row = table[(table.cell == "asgd") & (table.lr == 0.1) & (table.seed == 1)].iloc[0]
    assert row.score == pytest.approx((0.95 + 0.98) / 2 + 0.001)   # mean of the last 2 evals
    # the study now runs each cell at its α
    study = load_study(path)
    assert study.scenario(study.cells[0], 1).algorithm.lr == 0.1
    assert study.scenario(study.cells[1], 1).algorithm.lr == 0.01
    # the tuning resumes from the committed results alone
    shutil.rmtree(tmp_path / "out")
    runner = LrRunner()
    monkeypatch.setattr(study_mod, "engine_runner", lambda source: runner)
    assert main(["study", "tune", str(path), "--out", str(tmp_path / "out"),
                 "--results", str(tmp_path / "res-tuning")]) == 0
    assert runner.calls == []
    # the report names each cell's α; a choice at the grid's edge (0.01 of 0.01 · 0.1 · 1) is flagged
    monkeypatch.setattr(study_mod, "engine_runner", lambda source: FakeRunner())
    run_study(load_study(path), tmp_path / "out", FakeRunner(), results=tmp_path / "res")
    md = write_study_report(tmp_path / "res").markdown.read_text()
    assert "## α per cell, chosen by edgebed study tune on a validation split (the whole table: study.tuning.csv)" in md
    assert "| asgd | 0.1 | 0.01 · 0.1 · 1 |  |" in md
    assert "| adacomp | 0.01 | 0.01 · 0.1 · 1 | at the grid's edge: the best α may lie beyond it |" in md


def test_an_incomplete_grid_chooses_nothing_for_that_cell(tmp_path, monkeypatch):
    path = write_study(tmp_path, tuning=TUNING, **COMPRESSION)
    monkeypatch.setattr(study_mod, "engine_runner", lambda source: LrRunner(fail=("adacomp-lr-1",)))
    assert main(["study", "tune", str(path), "--out", str(tmp_path / "out")]) == 1
    tuned = yaml.safe_load(tuned_path(path).read_text())
    assert "adacomp" not in tuned["chosen"] and tuned["not_complete"] == ["adacomp"]


def test_validate_checks_a_tuning_output_against_its_study(tmp_path, capsys):
    path = write_study(tmp_path, tuning=TUNING, **COMPRESSION)
    tp = tuned_path(path)
    tp.write_text(yaml.safe_dump({"rule": "final-smoothed", "chosen": {"asgd": 0.1, "adacomp": 0.02}}))
    assert main(["validate", str(tp)]) == 0
    out = capsys.readouterr()
    assert f"{tp}: ok — α for 2 of the 3 cells of study st (not tuned yet: comp-asgd)" in out.out
    assert "α {'adacomp': 0.02} not in the study's tuning grid [0.01, 0.1, 1.0]" in out.err
    tp.write_text(yaml.safe_dump({"chosen": {"asgd": "fast"}}))
    assert main(["validate", str(tp)]) == 2
    assert "chosen α must be numbers > 0, got {'asgd': 'fast'}; delete it and run `edgebed study tune" \
        in capsys.readouterr().err
    tp.write_text(yaml.safe_dump({"chosen": {"asgd-typo": 0.1}}))
    assert main(["validate", str(tp)]) == 2
    assert "chosen α for cells ['asgd-typo'] that" in capsys.readouterr().err
    orphan = tmp_path / "gone.tuned.yaml"
    orphan.write_text(yaml.safe_dump({"chosen": {"asgd": 0.1}}))
    assert main(["validate", str(orphan)]) == 2
    assert "for the study gone.yaml, which is not there; put it beside its study file" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[3] / "scenarios" / "studies")
                                        .glob("*.tuned.yaml")), ids=lambda p: p.name)
def test_every_shipped_tuning_output_validates(path, capsys):
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


def test_results_dir_resumes_and_reports_without_the_run_dirs(tmp_path):
    study = load_study(write_study(tmp_path, targets=[0.9], smoothing=1, **COMPRESSION))
    run_study(study, tmp_path / "out", FakeRunner(), results=tmp_path / "res")
    full = pd.read_csv(write_study_report(tmp_path / "out" / "st", tmp_path / "r1").table_csv)
    shutil.rmtree(tmp_path / "out")
    runner = FakeRunner()
    status = run_study(study, tmp_path / "out", runner, results=tmp_path / "res")
    assert runner.calls == [] and status["skipped"] == 6
    compact = pd.read_csv(write_study_report(tmp_path / "res", tmp_path / "r2").table_csv)
    cols = ["label", "best_acc_mean", "ingress_to_target_mean", "ingress_ratio_vs_baseline", "tau_mean"]
    pd.testing.assert_frame_equal(full[cols], compact[cols])
    size = sum(f.stat().st_size for f in (tmp_path / "res" / "runs").rglob("*") if f.is_file())
    assert size < 40_000                                       # 6 runs, no updates tables
    summary = yaml.safe_load((tmp_path / "res/runs/asgd/seed-1/summary.json").read_text())
    assert summary["compact"]["staleness_tau"]["p90"] == 0
    assert summary["compact"]["paper_bytes_per_update"] > 0


def test_import_takes_only_complete_runs_of_the_same_scenario(tmp_path):
    path = write_study(tmp_path, **COMPRESSION)
    run_study(load_study(path), tmp_path / "out", FakeRunner())
    other = load_study(path, ("eval.every=50",))                # another resolved scenario
    st = import_runs(other, tmp_path / "out" / "st", tmp_path / "res")
    assert st["imported"] == 0 and len(st["not_taken"]) == 6
    assert main(["study", "import", str(path), str(tmp_path / "out" / "st"), "--into", str(tmp_path / "res")]) == 0
    st = yaml.safe_load((tmp_path / "res" / "status.json").read_text())
    assert st["complete"] == 6 and all(e["run"] == f"runs/{e['cell']}/seed-{e['seed']}" for e in st["cells"])
    assert "| adacomp | 2 |" in write_study_report(tmp_path / "res").table_markdown


def test_a_run_recorded_before_a_new_default_key_still_counts(tmp_path):
    path = write_study(tmp_path, seeds=1, cells=COMPRESSION["cells"][:1])
    run_study(load_study(path), tmp_path / "out", FakeRunner())
    sc_file = next((tmp_path / "out").rglob("scenario.yaml"))
    old = yaml.safe_load(sc_file.read_text())
    del old["dataset"]["validation_samples"]                   # as written before the key existed
    sc_file.write_text(yaml.safe_dump(old))
    runner = FakeRunner()
    assert run_study(load_study(path), tmp_path / "out", runner)["skipped"] == 1 and runner.calls == []
    old["dataset"]["retired_key"] = 1                          # a key today's schema doesn't know
    sc_file.write_text(yaml.safe_dump(old))
    assert run_study(load_study(path), tmp_path / "out", runner)["complete"] == 1


def test_target_tables_split_the_ratio_into_bytes_per_update_and_updates(tmp_path):
    study = load_study(write_study(tmp_path, targets=[0.9], **COMPRESSION))
    run_study(study, tmp_path / "out", FakeRunner())
    rep = write_study_report(tmp_path / "out" / "st")
    t = pd.read_csv(rep.out_dir / "targets-90.csv").set_index("label")
    # asgd: 0.95+ at update 300 (1000 B/update); adacomp: 0.9+ at 200 (10 B/update)
    assert t.loc["asgd", "updates_mean"] == 300 and t.loc["adacomp", "updates_mean"] == 200
    assert t.loc["adacomp", "bytes_per_update_factor"] == pytest.approx(100)
    assert t.loc["adacomp", "updates_factor"] == pytest.approx(1.5)
    assert t.loc["adacomp", "ingress_ratio"] == pytest.approx(150)
    assert t.loc["adacomp", "ratio_min"] == t.loc["adacomp", "ratio_max"] == pytest.approx(150)
    assert t.loc["comp-asgd", "reached"] == 2 and t.loc["comp-asgd", "updates_mean"] == 400
    md = rep.markdown.read_text()
    assert "150.0× = 100.0× per update × 1.50 updates" in md and "## To 90 %" in md


def test_two_protocols_side_by_side(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    run_study(load_study(write_study(a, seeds=1, protocol="tuned", **COMPRESSION)), a / "out", FakeRunner())
    run_study(load_study(write_study(b, seeds=1, protocol="paper", **COMPRESSION)), b / "out", FakeRunner())
    rep = write_study_report([a / "out" / "st", b / "out" / "st"], tmp_path / "both")
    labels = list(pd.read_csv(rep.table_csv)["label"])
    assert labels == [f"{p}: {c}" for p in ("tuned", "paper") for c in ("asgd", "adacomp", "comp-asgd")]
    num = pd.read_csv(rep.table_csv).set_index("label")
    assert num.loc["paper: adacomp", "ingress_ratio_vs_baseline"] == pytest.approx(400_000 / 3_000, abs=0.01)


def test_smoothed_targets_read_the_trailing_moving_average():
    ev = pd.DataFrame({"update": [100, 200, 300, 400, 500], "wall_time": 0.0, "ingress_bytes": [1, 2, 3, 4, 5],
                       "accuracy": [0.5, 0.97, 0.6, 0.97, 0.98]})
    assert list(moving_average(ev, 2)["smoothed"].round(3)[1:]) == [0.735, 0.785, 0.785, 0.975]
    hit = smoothed_to_target(ev, 0.97, 2)
    assert (hit.update, hit.ingress_bytes) == (500, 5)      # the raw curve would say 200
    assert smoothed_best(ev, 2) == pytest.approx(0.975) and smoothed_to_target(ev, 0.99, 2) is None
    assert math.isnan(smoothed_best(ev, 6))


def test_validation_split_is_carved_from_training_and_never_the_test_set():
    ds = Dataset(np.arange(10)[:, None], np.arange(10), np.full((3, 1), 99), np.full(3, 99))
    v = validation_split(ds, 3)
    assert list(v.train_y) == list(range(7)) and list(v.test_y) == [7, 8, 9]
    with pytest.raises(DatasetError, match="validation_samples=10 must be between 1 and"):
        validation_split(ds, 10)


STUDIES = sorted(p for p in (Path(__file__).resolve().parents[3] / "scenarios" / "studies").glob("*.yaml")
                 if not p.name.endswith(".tuned.yaml"))


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_every_shipped_study_loads_and_every_smoke_variant_has_its_full_study(path):
    study = load_study(path)
    assert study.cells and study.spec.seed_list
    if path.stem.endswith("-smoke"):
        assert path.with_name(path.name.replace("-smoke", "")).is_file()
    else:
        full = path.stem.removesuffix("-reduced")       # a reduced-scale variant shares the full one's smoke
        assert path.with_name(f"{full}-smoke.yaml").is_file(), "every study has a -smoke variant"


def test_dense_eval_sets_every_cells_eval_dense_at_the_study_targets(tmp_path):
    path = write_study(tmp_path, **COMPRESSION, targets=[0.9, 0.96], dense_eval={"every": 25})
    study = load_study(path)
    sc = study.scenario(study.cells[0], 1)
    assert sc.eval.dense.near == sorted({study.spec.target, 0.9, 0.96})
    assert (sc.eval.dense.within, sc.eval.dense.every) == (0.01, 25)
    assert sc.eval.every % 25 == 0


def test_another_study_takes_the_runs_of_the_same_experiment_from_committed_results(tmp_path):
    """A study of new cells next to another study's baseline (same base, same cell id and overrides)
    takes that baseline's committed compact runs: the scenario decides, not the study's name."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    run_study(load_study(write_study(a, **COMPRESSION)), a / "out", FakeRunner(), results=a / "res")
    newer = dict(baseline="asgd", cells=[COMPRESSION["cells"][0],
                                          {"label": "ef", "set": {"algorithm.name": "adacomp", "algorithm.c": 0.001}}])
    path = write_study(b, **{**newer, "name": "other"})
    study = load_study(path)
    recorded = yaml.safe_load((a / "res/runs/asgd/seed-1/scenario.yaml").read_text())
    assert recorded["name"] != study.scenario(study.cells[0], 1).name
    assert storage.same_scenario(recorded, study.scenario(study.cells[0], 1))
    assert not storage.same_scenario(recorded, study.scenario(study.cells[0], 2))       # another seed
    assert main(["study", "import", str(path), str(a / "res"), "--into", str(b / "res")]) == 0
    st = yaml.safe_load((b / "res" / "status.json").read_text())
    assert [(e["cell"], e["seed"], e["status"]) for e in st["cells"]] == [
        ("asgd", 1, "complete"), ("asgd", 2, "complete"), ("ef", 1, "not run"), ("ef", 2, "not run")]
    runner = FakeRunner()
    status = run_study(study, b / "out", runner, results=b / "res")
    assert status["skipped"] == 2 and runner.calls == ["other-ef-s1", "other-ef-s2"]
    # a different experiment under the same cell id is named, not taken
    changed = load_study(path, ("eval.every=50",))
    assert import_runs(changed, a / "res", tmp_path / "res2")["not_taken"] == ["asgd · seed 1", "asgd · seed 2"]


def test_import_tuning_runs_of_another_study(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    monkeypatch.setattr(study_mod, "engine_runner", lambda source: LrRunner())
    pa = write_study(a, tuning=TUNING, **COMPRESSION)
    assert main(["study", "tune", str(pa), "--out", str(a / "out"), "--results", str(a / "res-tuning")]) == 0
    pb = write_study(b, tuning=TUNING, name="other", baseline="asgd", cells=COMPRESSION["cells"][:2])
    assert main(["study", "import", str(pb), str(a / "res-tuning"), "--tuning",
                 "--into", str(b / "res-tuning")]) == 0
    assert len(list((b / "res-tuning" / "runs").glob("*/seed-*/summary.json"))) == 12   # 2 cells × 3 α × 2 seeds
    runner = LrRunner()
    monkeypatch.setattr(study_mod, "engine_runner", lambda source: runner)
    assert main(["study", "tune", str(pb), "--out", str(b / "out"), "--results", str(b / "res-tuning")]) == 0
    assert runner.calls == []                                  # nothing ran again
    assert yaml.safe_load(tuned_path(pb).read_text())["chosen"] == {"asgd": 0.1, "adacomp": 0.01}


def test_status_names_what_is_missing_and_the_commands_that_resume_it(tmp_path, monkeypatch, capsys):
    path = write_study(tmp_path, tuning=TUNING, **COMPRESSION)
    res = tmp_path / "res"
    assert main(["study", "status", str(path), "--results", str(res)]) == 0
    out = capsys.readouterr().out
    assert "0 of 6 runs complete" in out and "tuning grid: 0 of 18 runs; α not chosen yet for asgd" in out
    assert f"edgebed study tune {path} --results {res}-tuning" in out
    monkeypatch.setattr(study_mod, "engine_runner", lambda source: LrRunner())
    assert main(["study", "tune", str(path), "--out", str(tmp_path / "out"), "--results", f"{res}-tuning"]) == 0
    run_study(load_study(path).select(("asgd",)).first_seeds(1), tmp_path / "out", FakeRunner(), results=res)
    summary = res / "runs" / "asgd" / "seed-1" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "wall_time_s": 720.0}))
    assert main(["study", "status", str(path), "--results", str(res)]) == 0
    out = capsys.readouterr().out
    assert "5 runs to go: about 1 core-hours at the median 720 s" in out
    assert "1 of 6 runs complete" in out and "tuning grid: 18 of 18 runs; α chosen for every cell" in out
    assert "  asgd       1✓ 2·" in out and "  comp-asgd  1· 2·" in out
    assert "study tune" not in out and f"edgebed study run {path} --results {res}" in out
    # a run directory not yet compacted counts with --out
    run_study(load_study(path).select(("adacomp",)).first_seeds(1), tmp_path / "out", FakeRunner())
    st = progress(load_study(path), res, tmp_path / "out")
    assert [r["complete"] for r in st["cells"]] == [[1], [1], []]
