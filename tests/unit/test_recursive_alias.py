"""A YAML alias used inside its own anchor (issue #51.13) is refused when the file is read: by
`validate`, and by `run` before any run directory exists."""
import pytest

import edgebed
from edgebed.cli import _validate_one
from edgebed.scenario import ScenarioError, load_scenario

pytestmark = pytest.mark.timeout(60)

SCENARIO = ("name: loop\nalgorithm: {name: asgd, lr: 0.05, batch_size: 10}\nworkers: {n: 2}\n"
            "stop: {updates: 10}\nruntime: {name: sim}\n"
            "dataset: &d {name: mnist, source: bundled, test_fraction: 0.2, options: {again: *d}}\n")


@pytest.mark.parametrize("text", [SCENARIO, "name: &n [*n]\n", "name: loop\nmodel: {name: mlp, args: &a {x: [*a]}}\n"])
def test_a_recursive_alias_is_refused_with_its_line(tmp_path, text):
    p = tmp_path / "loop.yaml"
    p.write_text(text)
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert str(p) in msg and "line " in msg and "contains itself" in msg and len(msg) < 400


def test_validate_and_run_refuse_it_and_leave_no_run_directory(tmp_path):
    p = tmp_path / "loop.yaml"
    p.write_text(SCENARIO)
    out = _validate_one(p, ())
    assert not out["ok"] and any("contains itself" in e for e in out["errors"]), out["errors"]
    with pytest.raises(ScenarioError, match="contains itself"):
        edgebed.run(str(p), out=str(tmp_path / "runs"), progress=False)
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


def test_a_recursive_mapping_from_the_api_is_refused_too(tmp_path):
    data = {"name": "loop", "workers": {"n": 2}, "stop": {"updates": 10}, "runtime": {"name": "sim"},
            "model": {"name": "mlp", "args": {}}}
    data["model"]["args"]["again"] = data["model"]["args"]
    with pytest.raises(ScenarioError, match="model.args.again contains itself"):
        edgebed.run(data, out=str(tmp_path / "runs"), progress=False)
    assert not (tmp_path / "runs").exists()


def test_a_file_nested_too_deep_names_itself(tmp_path):
    p = tmp_path / "deep.yaml"
    p.write_text("name: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ScenarioError, match=f"{p}: refused: its values are nested too deep"):
        load_scenario(p)
