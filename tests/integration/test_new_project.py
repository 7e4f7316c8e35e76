"""`edgebed new NAME` (issue 56): the project it writes validates and runs as written, from the
command line and from its notebook, and its data conversion stub writes data a scenario trains on."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from edgebed.scaffold import FILES


def edgebed(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgebed.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=110)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_edgebed_new_writes_a_project_that_validates_and_runs(tmp_path):
    made = edgebed("new", "demo", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    demo = tmp_path / "demo"
    assert sorted(p.name for p in demo.iterdir()) == sorted(FILES)
    assert "{{" not in "".join((demo / f).read_text() for f in FILES)
    again = edgebed("new", "demo", cwd=tmp_path)      # never over an existing directory
    assert again.returncode == 2 and "demo: already exists" in again.stderr
    checked = edgebed("--json", "validate", "demo/scenario.yaml", "demo/study.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert [r["ok"] for r in json.loads(checked.stdout)] == [True, True]
    ran = edgebed("--json", "run", "demo/scenario.yaml", "--out", "runs", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    summary = json.loads(ran.stdout)
    assert summary["status"] == "complete" and summary["updates"] == 300
    assert summary["final_accuracy"] > 0.3          # it trained: 10 classes, chance is 0.1
    assert len(list((tmp_path / "runs").glob("demo-*/summary.json"))) == 1


def test_a_bad_project_name_is_refused(tmp_path):
    bad = edgebed("new", "my project", cwd=tmp_path)
    assert bad.returncode == 2 and "a project name is 1 to 64 letters" in bad.stderr
    assert not (tmp_path / "my project").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_projects_data_stub_and_notebook_run(tmp_path):
    import nbformat
    from nbclient import NotebookClient
    assert edgebed("new", "proj", cwd=tmp_path).returncode == 0
    proj = tmp_path / "proj"
    # the conversion stub writes .npz files that the scenario trains on, as its comment says
    conv = subprocess.run([sys.executable, "convert.py"], cwd=proj, capture_output=True, text=True, timeout=60)
    assert conv.returncode == 0, conv.stderr
    assert "8000 samples of shape (1, 28, 28), 10 classes" in conv.stdout
    npz = ["--set", "dataset.source=path", "--set", "dataset.format=npz", "--set", "dataset.path=data/train.npz",
           "--set", "dataset.test_path=data/test.npz", "--set", "stop.updates=100", "--set", "eval.every=100"]
    ran = edgebed("--json", "run", "scenario.yaml", *npz, "--out", "runs", cwd=proj)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout)["status"] == "complete"
    # the notebook: valid nbformat, and it runs top to bottom in a fresh kernel from the project's directory
    nb = nbformat.read(proj / "notebook.ipynb", as_version=4)
    nbformat.validate(nb)
    client = NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(proj)}})
    km = client.create_kernel_manager()
    km.kernel_spec.argv[0] = sys.executable        # this interpreter (the venv's), whatever kernels the host has
    client.execute()
    table = next(o["data"]["text/plain"] for o in nb.cells[-1].outputs if o["output_type"] == "execute_result")
    assert "asgd" in table and "adacomp c=0.01" in table
    assert len(list((proj / "runs").glob("proj-*"))) == 3
