"""`edgebed study status` looks where `edgebed study run` wrote — its default output folder — and says
where it looked, so a study just run is never reported as "0 of N complete"."""
from __future__ import annotations

import pytest

from edgebed.cli import main
from edgebed.study import runner as study_mod
from tests.unit.study.fakes import COMPRESSION, FakeRunner, write_study

pytestmark = pytest.mark.timeout(60)


def test_status_after_a_run_with_the_default_output_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_study(tmp_path, **COMPRESSION)
    monkeypatch.setattr(study_mod, "engine_runner", lambda source: FakeRunner())
    assert main(["study", "run", str(path)]) == 0           # writes studies-out/st/
    capsys.readouterr()
    assert main(["study", "status", str(path)]) == 0
    out = capsys.readouterr().out
    assert "6 of 6 runs complete" in out
    assert "looked in: studies-out/st/ (run directories), benchmarks/results/studies/st/ (not there)" in out
    assert "edgebed study run" not in out                    # nothing to resume


def test_status_says_where_it_looked_when_it_finds_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_study(tmp_path, **COMPRESSION)
    assert main(["study", "status", str(path), "--json"]) == 0
    import json
    st = json.loads(capsys.readouterr().out)
    assert st["complete"] == 0 and st["looked_in"] == {
        "runs": "studies-out/st", "runs_found": False,
        "results": "benchmarks/results/studies/st", "results_found": False}
    assert main(["study", "status", str(path)]) == 0
    assert "runs written elsewhere? give --out" in capsys.readouterr().out


def test_default_results_are_found_from_the_study_files_project(tmp_path, monkeypatch, capsys):
    """Run from another folder, the committed results beside the study's project still count."""
    project = tmp_path / "project"
    (project / "scenarios").mkdir(parents=True)
    path = write_study(project / "scenarios", **COMPRESSION)
    res = project / "benchmarks" / "results" / "studies" / "st"
    monkeypatch.setattr(study_mod, "engine_runner", lambda source: FakeRunner())
    monkeypatch.chdir(project)
    assert main(["study", "run", str(path), "--results", str(res.relative_to(project)), "--seeds", "1"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    capsys.readouterr()
    assert main(["study", "status", str(path)]) == 0
    out = capsys.readouterr().out
    assert "3 of 6 runs complete" in out and f"{res}/ (compact results)" in out


def test_status_explains_its_marks_and_counts_in_the_singular(tmp_path, monkeypatch, capsys):
    """`1·` / `1✓` are explained on the page, and one seed is "1 seed" (issue #41.4)."""
    monkeypatch.chdir(tmp_path)
    path = write_study(tmp_path, **{**COMPRESSION, "seeds": 1})
    assert main(["study", "status", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1·" in out and "✓ complete, · not yet" in out, out
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "3 cells × 1 seed = 3 runs" in out and "1 seeds" not in out, out
