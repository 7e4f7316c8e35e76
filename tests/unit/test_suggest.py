"""Issue 56, point 4: a typo gets the resolved directory and the close names, not generic advice."""
import json
import os
import sys

import numpy as np
import pytest

from edgebed.cli import main
from edgebed.scenario import ScenarioError, parse_scenario
from edgebed.suggest import missing_path, module_candidates

pytestmark = pytest.mark.timeout(60)

BASE = "name: t\nworkers: {n: 2}\nstop: {updates: 5}\neval: {every: 5}\nruntime: {name: sim}\n"


def _validate(capsys, path) -> str:
    assert main(["--json", "validate", str(path)]) == 2
    return "\n".join(json.loads(capsys.readouterr().out)[0]["errors"])


def test_a_typo_in_a_data_path_names_the_directory_it_was_resolved_against(tmp_path, monkeypatch, capsys):
    (tmp_path / "data").mkdir()
    np.savez(tmp_path / "data" / "train.npz", x=np.zeros((20, 1, 28, 28), np.uint8), y=np.arange(20) % 10)
    (tmp_path / "s.yaml").write_text(BASE + "dataset: {format: npz, path: data/trian.npz}\n")
    monkeypatch.chdir(tmp_path)
    errors = _validate(capsys, "s.yaml")
    assert f"relative to {tmp_path}" in errors and "did you mean data/train.npz?" in errors
    assert "np.savez" not in errors           # advice for writing a file, to a user who mistyped its name
    # an IDX directory: the same, and an absolute path names no working directory
    (tmp_path / "mnist").mkdir()
    (tmp_path / "i.yaml").write_text(BASE + f"dataset: {{source: path, path: {tmp_path / 'mnsit'}}}\n")
    errors = _validate(capsys, "i.yaml")
    assert f"looked for {tmp_path / 'mnsit'}; did you mean {tmp_path / 'mnist'}?" in errors and "relative to" not in errors


def test_a_typo_in_a_model_module_suggests_the_close_names(tmp_path, monkeypatch, capsys):
    # names of this test's own: a package imported here stays in sys.modules for the tests after it
    project = tmp_path / "project"
    (project / "nets56").mkdir(parents=True)
    (project / "nets56" / "__init__.py").write_text("")
    (project / "nets56" / "small.py").write_text("def small():\n    pass\n")
    (project / "model56.py").write_text("def make():\n    pass\n")
    monkeypatch.chdir(tmp_path)               # the scenario's directory is not the working directory
    monkeypatch.setattr("sys.path", list(sys.path))    # validate puts the scenario's directory on both
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))   # restored as it was, set or not
    try:
        for typo, close in (("modle56:make", "'model56:make'"), ("nets56.smal:small", "'nets56.small:small'"),
                            ("model56:mkae", "'model56:make'")):
            (project / "s.yaml").write_text(BASE + f"model: {{name: '{typo}'}}\n")
            errors = _validate(capsys, project / "s.yaml")
            assert f"did you mean {close}?" in errors, errors
            assert "PYTHONPATH" not in errors
        assert module_candidates("modle56", first=str(project)) == ["model56"]
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] in ("nets56", "model56")]:
            del sys.modules[name]


def test_a_path_whose_directory_is_missing_names_the_first_one_that_exists(tmp_path):
    (tmp_path / "datasets").mkdir()
    said = missing_path(tmp_path / "datsets" / "x.npz")
    assert f"looked for {tmp_path / 'datsets' / 'x.npz'}" in said and "did you mean datasets?" in said


def test_an_unknown_key_points_to_the_sites_scenario_reference():
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"name": "t", "workers": {"n": 2}, "stop": {"updates": 5}, "algoritm": {"name": "asgd"}})
    assert "Scenario keys page, scenario-reference/" in str(err.value)
    assert "scenarios/README.md" not in str(err.value)
