"""Studies: grid expansion, validation messages, resume, failed cells, and the aggregated report.

A fake runner stands in for the Engine: it writes a real run directory whose accuracy curve and
ingress depend only on the algorithm, so the report's numbers are known by hand.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest

from edgebed.study.report import write_study_report
from edgebed.cli import main
from edgebed.study.runner import StudyError, load_study, run_study
from tests.unit.study.fakes import COMPRESSION, FakeRunner, write_study

# -- grid expansion ---------------------------------------------------------------------------------

def test_sweep_is_the_full_grid_and_each_cell_resolves_its_overrides(tmp_path):
    study = load_study(write_study(tmp_path, set={"workers.n": 8},
                                   sweep={"algorithm.c": [0.1, 0.01], "dataset.train_samples": [1000, 2000, 4000]}))
    assert len(study.cells) == 6
    assert [c.label for c in study.cells][:2] == ["c=0.1 · train_samples=1000", "c=0.1 · train_samples=2000"]
    assert len({c.id for c in study.cells}) == 6
    sc = study.scenario(study.cells[5], 3)
    assert (sc.algorithm.c, sc.dataset.train_samples, sc.workers.n, sc.seed) == (0.01, 4000, 8, 3)
    assert sc.name.startswith("st-") and sc.name.endswith("-s3")
    assert study.spec.seed_list == [1, 2]


def test_cells_times_sweep_and_baseline_at_the_same_sweep_point(tmp_path):
    study = load_study(write_study(tmp_path, sweep={"dataset.train_samples": [1000, 8000]}, **COMPRESSION))
    assert len(study.cells) == 6
    comp_small = next(c for c in study.cells if c.label == "comp-asgd · train_samples=1000")
    assert study.baseline_for(comp_small).label == "asgd · train_samples=1000"
    assert study.scenario(comp_small, 1).algorithm.name == "comp-asgd"


def test_structured_values_and_explicit_seed_list(tmp_path):
    classes = [{"name": "fast", "share": 0.5}, {"name": "slow", "share": 0.5, "slowdown": 10}]
    study = load_study(write_study(tmp_path, seeds=[7, 11],
                                   cells=[{"label": "two classes", "set": {"workers.classes": classes}},
                                          {"set": {"algorithm.name": "asgd"}}]))
    assert study.spec.seed_list == [7, 11]
    assert [c.label for c in study.cells] == ["two classes", "name=asgd"]
    assert [k.slowdown for k in study.scenario(study.cells[0], 7).workers.classes] == [1.0, 10.0]


@pytest.mark.parametrize("spec, expected", [
    ({"sweeps": {"algorithm.c": [0.1]}}, "sweeps: unknown key"),
    ({"sweep": {"algorithm.c": []}}, "has no values"),
    ({"seeds": 0}, "seeds must be"),
    ({"base": "missing.yaml"}, "base: 'missing.yaml' is not a file"),
    ({"baseline": "nope", "sweep": {"algorithm.c": [0.1]}}, "baseline: 'nope' names no cell"),
    ({"sweep": {"algorithm.name": ["adacomp", "sgd"]}}, "cell 'name=sgd'"),
    ({"sweep": {"algorithm.nme": ["asgd"]}}, "algorithm.nme: unknown key"),
    ({"cells": [{"label": "a", "set": {}}, {"label": "a", "set": {}}]}, "same label"),
    ({"target": 97}, "target"),
])
def test_invalid_study_says_file_key_and_what_to_do(tmp_path, spec, expected):
    path = write_study(tmp_path, **spec)
    with pytest.raises(StudyError) as err:
        load_study(path)
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_cli_reports_a_bad_study_and_exits_2(tmp_path, capsys):
    path = write_study(tmp_path, sweep={"algorithm.c": [0.1]}, bogus=1)
    assert main(["study", "run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "bogus: unknown key" in capsys.readouterr().err


# -- running ----------------------------------------------------------------------------------------

def test_resume_skips_complete_cells_and_reruns_what_changed(tmp_path):
    study = load_study(write_study(tmp_path, **COMPRESSION))
    fake, lines = FakeRunner(), []
    status = run_study(study, tmp_path / "out", fake, lambda line, final: lines.append(line))
    assert len(fake.calls) == 6 and status["complete"] == 6
    assert any(line.startswith("[1/6] asgd · seed 1 | updates 400") for line in lines)
    assert any(line.startswith("[6/6] comp-asgd · seed 2: complete") for line in lines)

    again = FakeRunner()
    status = run_study(load_study(study.path), tmp_path / "out", again)
    assert again.calls == [] and status["skipped"] == 6
    on_disk = json.loads((tmp_path / "out" / "st" / "status.json").read_text())
    assert on_disk["skipped"] == 6 and all(e["run"] for e in on_disk["cells"])

    changed = FakeRunner()  # a --set changes every resolved scenario, so everything reruns
    run_study(load_study(study.path, ("eval.every=50",)), tmp_path / "out", changed)
    assert len(changed.calls) == 6


def test_a_failed_cell_is_recorded_and_the_study_goes_on(tmp_path):
    study = load_study(write_study(tmp_path, **COMPRESSION))
    status = run_study(study, tmp_path / "out", FakeRunner(fail=("comp-asgd",)))
    assert (status["complete"], status["failed"]) == (4, 2)
    failed = [e for e in status["cells"] if e["status"] == "failed"]
    assert {e["label"] for e in failed} == {"comp-asgd"}
    assert "RuntimeError: boom in st-comp-asgd-s1" in failed[0]["error"]
    assert "boom" in (tmp_path / "out" / "st" / "runs" / "comp-asgd" / "seed-1" / "error.txt").read_text()

    retry = FakeRunner()  # the next invocation runs only what failed
    status = run_study(load_study(study.path), tmp_path / "out", retry)
    assert sorted(retry.calls) == ["st-comp-asgd-s1", "st-comp-asgd-s2"]
    assert (status["complete"], status["skipped"], status["failed"]) == (2, 4, 0)


@pytest.mark.slow
def test_jobs_run_cells_in_parallel_processes_and_keep_study_order(tmp_path):
    study = load_study(write_study(tmp_path, **COMPRESSION))
    status = run_study(study, tmp_path / "out", FakeRunner(fail=("comp-asgd-s2",)), jobs=2)
    assert (status["complete"], status["failed"], status["jobs"]) == (5, 1, 2)
    order = [(e["label"], e["seed"]) for e in status["cells"]]
    assert order == [(c, s) for c in ("asgd", "adacomp", "comp-asgd") for s in (1, 2)]
    assert "boom in st-comp-asgd-s2" in status["cells"][-1]["error"]
    for e in status["cells"][:-1]:  # each worker wrote a real run dir the report can read
        assert (tmp_path / "out" / "st" / e["run"] / "summary.json").exists()

    status = run_study(load_study(study.path), tmp_path / "out", FakeRunner(), jobs=3)
    assert (status["complete"], status["skipped"]) == (1, 5)
    with pytest.raises(StudyError, match="jobs = 0"):
        run_study(study, tmp_path / "out", FakeRunner(), jobs=0)


def test_cli_exit_code_says_whether_a_cell_failed(tmp_path, monkeypatch):
    path = write_study(tmp_path, **COMPRESSION)
    import edgebed.study.runner as mod
    monkeypatch.setattr(mod, "engine_runner", lambda source: FakeRunner(fail=("adacomp",)))
    assert main(["study", "run", str(path), "--out", str(tmp_path / "out")]) == 1
    monkeypatch.setattr(mod, "engine_runner", lambda source: FakeRunner())
    assert main(["study", "run", str(path), "--out", str(tmp_path / "out")]) == 0


# -- report -----------------------------------------------------------------------------------------

def test_report_has_each_cell_with_hand_computed_numbers(tmp_path):
    study = load_study(write_study(tmp_path, **COMPRESSION))
    run_study(study, tmp_path / "out", FakeRunner(fail=()))
    rep = write_study_report(tmp_path / "out" / "st")
    num = pd.read_csv(rep.table_csv).set_index("label")
    assert list(num.index) == ["asgd", "adacomp", "comp-asgd"]
    # asgd reaches 97 % at update 400 (0.98/0.981), adacomp at 300 (0.975/0.976); comp-asgd never
    assert num.loc["asgd", "ingress_to_target_mean"] == 400 * 1000
    assert num.loc["adacomp", "ingress_to_target_mean"] == 300 * 10
    assert num.loc["adacomp", "ingress_ratio_vs_baseline"] == pytest.approx(400_000 / 3_000, abs=0.01)
    assert num.loc["adacomp", "best_acc_min"] == pytest.approx(0.991)
    assert num.loc["adacomp", "best_acc_max"] == pytest.approx(0.992)
    assert num.loc["comp-asgd", "reached_target"] == 0
    assert "| adacomp | 2 | 99.15 [99.10–99.20] |" in rep.table_markdown
    assert "133.3×" in rep.table_markdown and "not reached" in rep.table_markdown
    assert len(pd.read_csv(rep.runs_csv)) == 6
    page = rep.html.read_text()
    assert page.count("data:image/png;base64,") == 2 and "<table" in page and "src='accuracy" not in page
    assert {p.name for p in rep.plots.values()} == {"accuracy_vs_updates.png", "accuracy_vs_ingress.png"}
    classes = pd.read_csv(rep.classes_csv)  # the fake's devices 1-3 are "fast", device 0 "slow"
    fast = classes[(classes.cell == "asgd") & (classes.speed_class == "fast")].iloc[0]
    assert fast.share_mean == pytest.approx(0.75) and fast.rate_ratio_mean == pytest.approx(1.0)


def test_report_shows_egress_per_update_only_when_cells_differ_in_it(tmp_path):
    (tmp_path / "a").mkdir()
    run_study(load_study(write_study(tmp_path / "a", **COMPRESSION)), tmp_path / "a" / "out", FakeRunner())
    assert "egress" not in write_study_report(tmp_path / "a" / "out" / "st").table_markdown
    cells = COMPRESSION["cells"] + [{"label": "adacomp bf16 pulls",
                                     "set": {"algorithm.name": "adacomp", "compression.pull": "bf16"}}]
    (tmp_path / "b").mkdir()
    run_study(load_study(write_study(tmp_path / "b", baseline="asgd", cells=cells)), tmp_path / "b" / "out",
              FakeRunner())
    rep = write_study_report(tmp_path / "b" / "out" / "st")
    lines = {ln.split("|")[1].strip(): ln for ln in rep.table_markdown.splitlines()[2:]}
    assert "egress kB / update (pulls)" in rep.table_markdown.splitlines()[0]
    assert lines["adacomp"].rstrip(" |").endswith("| 4.0") and lines["adacomp bf16 pulls"].rstrip(" |").endswith("| 2.0")
    num = pd.read_csv(rep.table_csv).set_index("label")
    assert num.loc["adacomp bf16 pulls", "egress_per_update_mean"] == 2_000


def test_report_prints_published_reference_numbers_next_to_ours(tmp_path):
    cells = [dict(c) for c in COMPRESSION["cells"]]
    cells[0]["reference"] = {"final_accuracy": 0.9785}
    cells[1]["reference"] = {"final_accuracy": 0.9859, "ingress_ratio": 191}
    path = write_study(tmp_path, seeds=1, baseline="asgd", cells=cells, reference_source="the paper, Fig. 3")
    run_study(load_study(path), tmp_path / "out", FakeRunner())
    rep = write_study_report(tmp_path / "out" / "st")
    lines = {ln.split("|")[1].strip(): ln for ln in rep.table_markdown.splitlines()[2:]}
    assert lines["adacomp"].rstrip(" |").endswith("| 98.59 | 191.0×")
    assert lines["asgd"].rstrip(" |").endswith("| 97.85 | —")
    assert lines["comp-asgd"].rstrip(" |").endswith("| — | —")
    num = pd.read_csv(rep.table_csv).set_index("label")
    assert num.loc["adacomp", "reference_ingress_ratio"] == 191
    assert num.loc["adacomp", "ingress_ratio_vs_baseline"] == pytest.approx(400_000 / 3_000, abs=0.01)
    assert "published numbers, not ours — the paper, Fig. 3." in rep.markdown.read_text()
    # without references there are no reference columns
    plain = write_study_report(_plain_study(tmp_path), tmp_path / "rep")
    assert "reference" not in plain.table_markdown


def _plain_study(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    run_study(load_study(write_study(d, seeds=1, **COMPRESSION)), d / "out", FakeRunner())
    return d / "out" / "st"


def test_a_reference_key_out_of_range_is_refused(tmp_path):
    cells = [{"label": "asgd", "set": {"algorithm.name": "asgd"}, "reference": {"final_accuracy": 97.85}}]
    with pytest.raises(StudyError, match=r"reference.final_accuracy: .*as a fraction .97.85 % → 0.9785"):
        load_study(write_study(tmp_path, cells=cells))


def test_cells_option_runs_a_subset_keeps_the_rest_recorded_and_a_full_run_resumes(tmp_path, monkeypatch,
                                                                                    capsys):
    path = write_study(tmp_path, seeds=1, sweep={"dataset.train_samples": [800, 400]}, **COMPRESSION)
    import edgebed.study.runner as mod
    cli_runner = FakeRunner()
    monkeypatch.setattr(mod, "engine_runner", lambda source: cli_runner)
    assert main(["study", "run", str(path), "--out", str(tmp_path / "out"), "--cells", "adacomp*"]) == 0
    assert "2 cells (of 6) × 1 seed = 2 runs" in capsys.readouterr().err
    assert sorted(cli_runner.calls) == ["st-adacomp-train-samples-400-s1", "st-adacomp-train-samples-800-s1"]
    out2 = tmp_path / "out2"
    runner = FakeRunner()
    study = load_study(path).select(("*train_samples=800", "asgd*"))
    assert [c.label for c in study.selected] == ["asgd · train_samples=800", "asgd · train_samples=400",
                                                 "adacomp · train_samples=800", "comp-asgd · train_samples=800"]
    status = run_study(study, out2, runner)
    assert len(runner.calls) == 4 and status["total"] == 6 and status["selected"] == 4
    by_label = {e["label"]: e for e in status["cells"]}
    assert [e["label"] for e in status["cells"]][:2] == ["asgd · train_samples=800", "asgd · train_samples=400"]
    assert by_label["adacomp · train_samples=400"]["status"] == "not run" and status["not run"] == 2
    rep = write_study_report(out2 / "st")
    assert "4 of 6 runs" in rep.markdown.read_text()
    assert "adacomp · train_samples=400 · seed 1: not run; left out of the table" in rep.markdown.read_text()
    # a later invocation without --cells runs only the two left
    runner2 = FakeRunner()
    status = run_study(load_study(path), out2, runner2)
    assert sorted(runner2.calls) == ["st-adacomp-train-samples-400-s1", "st-comp-asgd-train-samples-400-s1"]
    assert status["skipped"] == 4 and status["complete"] == 2
    # and a --cells run after that keeps the others' complete runs in status.json
    status = run_study(load_study(path).select(("asgd*",)), out2, FakeRunner())
    assert status["skipped"] == 6 and len(status["cells"]) == 6


def test_cells_option_that_matches_nothing_lists_the_cells(tmp_path):
    study = load_study(write_study(tmp_path, **COMPRESSION))
    with pytest.raises(StudyError, match=r"--cells nope matches no cell; the cells are:\n  asgd   \(id asgd\)"):
        study.select(("nope",))


def test_report_at_another_target_without_rerunning(tmp_path, capsys):
    study = load_study(write_study(tmp_path, seeds=1, **COMPRESSION))
    run_study(study, tmp_path / "out", FakeRunner())
    # seed 1 curves (CURVES + 0.001): 90 % first at update 300 for asgd (0.951), 200 for adacomp (0.901)
    assert main(["study", "report", str(tmp_path / "out" / "st"), "--out", str(tmp_path / "r90"),
                 "--target", "0.9"]) == 0
    num = pd.read_csv(tmp_path / "r90" / "table.csv").set_index("label")
    assert num.loc["asgd", "ingress_to_target_mean"] == 300 * 1000
    assert num.loc["adacomp", "ingress_to_target_mean"] == 200 * 10
    assert num.loc["comp-asgd", "ingress_to_target_mean"] == 400 * 20      # 0.901 at 400
    assert "updates to 90 %" in capsys.readouterr().out
    assert main(["study", "report", str(tmp_path / "out" / "st"), "--target", "90"]) == 2
    assert "must be a fraction" in capsys.readouterr().err


def test_report_notes_failed_runs_and_shows_crashes(tmp_path):
    study = load_study(write_study(tmp_path, seeds=1, **COMPRESSION))
    run_study(study, tmp_path / "out", FakeRunner(fail=("comp-asgd",), crashed=2))
    rep = write_study_report(tmp_path / "out" / "st", tmp_path / "rep")
    text = rep.markdown.read_text()
    assert "comp-asgd · seed 1: failed — RuntimeError: boom" in text
    assert "| crashed |" in rep.table_markdown.splitlines()[0] + "|"
    assert pd.read_csv(rep.table_csv).set_index("label").loc["asgd", "crashed_mean"] == 2


def test_report_of_a_directory_that_is_no_study(tmp_path, capsys):
    assert main(["study", "report", str(tmp_path)]) == 2
    assert "no status.json" in capsys.readouterr().err


def test_seeds_option_runs_the_first_seeds_and_a_full_run_resumes(tmp_path, monkeypatch):
    path = write_study(tmp_path, seeds=3, **COMPRESSION)
    import edgebed.study.runner as mod
    first, rest = FakeRunner(), FakeRunner()
    monkeypatch.setattr(mod, "engine_runner", lambda source: first)
    assert main(["study", "run", str(path), "--out", str(tmp_path / "out"), "--seeds", "1",
                 "--results", str(tmp_path / "res")]) == 0
    assert sorted(first.calls) == ["st-adacomp-s1", "st-asgd-s1", "st-comp-asgd-s1"]
    for st in (json.loads((tmp_path / "out" / "st" / "status.json").read_text()),
               json.loads((tmp_path / "res" / "status.json").read_text())):
        assert st["total"] == 9 and st["complete"] == 3 and st["not run"] == 6   # the whole study counted
    monkeypatch.setattr(mod, "engine_runner", lambda source: rest)
    assert main(["study", "run", str(path), "--out", str(tmp_path / "out")]) == 0
    assert len(rest.calls) == 6 and not any(c.endswith("-s1") for c in rest.calls)
