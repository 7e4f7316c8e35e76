"""The shipped zoo scenarios: CIFAR-10 ResNet-20 (validated on a small file in CIFAR's format written
here, as a user with the data set would point it) and the BatchNorm AdaComp study (issue 38)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgebed.data import input_of, load_dataset
from edgebed.data.formats import LoadSpec, load
from edgebed.scenario import load_scenario
from edgebed.study.runner import load_study
from edgebed.study.tuning import tuning_study
from edgebed.workload import input_problems
from tests.unit.data.on_disk import write_cifar10

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]


def test_cifar10_resnet20_takes_a_set_in_cifars_format(tmp_path):
    write_cifar10(tmp_path, n_per_batch=6)
    where = ("dataset.source=path", f"dataset.path={tmp_path}")
    sc = load_scenario(ROOT / "scenarios" / "cifar10-resnet20.yaml", where)
    assert input_of(sc.dataset) == ((3, 32, 32), 10)
    assert input_problems(sc.model, (3, 32, 32), 10) == []
    ds = load_dataset(sc.dataset)
    assert ds.train_x.shape == (30, 3, 32, 32) and ds.test_x.shape == (6, 3, 32, 32)
    raw = load(LoadSpec("cifar10", str(tmp_path))).x       # normalised with the scenario's statistics
    np.testing.assert_allclose(ds.train_x[:, 2], (raw[:, 2] / 255 - 0.4465) / 0.2616, rtol=1e-5, atol=1e-5)
    out = subprocess.run([sys.executable, "-m", "edgebed.cli", "validate", "scenarios/cifar10-resnet20.yaml",
                          "--set", where[0], "--set", where[1]], cwd=ROOT, capture_output=True, text=True,
                         timeout=100)
    assert out.returncode == 0, out.stderr
    assert "272,474 parameters" in out.stdout


def test_cifar10_resnet20_downloads_by_default_and_validate_fetches_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    sc = load_scenario(ROOT / "scenarios" / "cifar10-resnet20.yaml")
    assert sc.dataset.format == "cifar10" and sc.dataset.source == "download"
    assert input_of(sc.dataset) is None                      # not cached: nothing is fetched to learn it
    assert not (tmp_path / ".cache").exists()


def test_bn_adacomp_study_is_the_question_of_issue_38():
    study = load_study(ROOT / "scenarios" / "studies" / "bn-adacomp.yaml")
    assert [c.label for c in study.cells] == ["asgd", "adacomp c=0.1", "adacomp c=0.01", "adacomp c=0.01 ef"]
    assert study.spec.seed_list == [1, 2, 3] and study.spec.targets == [0.75, 0.80]
    for cell in study.cells:
        sc = study.scenario(cell, 1)
        assert sc.model.name == "resnet20" and sc.model.args["depth"] == 8 and sc.model.args["in_channels"] == 1
        assert sc.dataset.name == "fashion-mnist" and sc.stop.updates == 4_000
        assert sc.compression.error_feedback == cell.label.endswith("ef")
    t = study.spec.tuning
    assert t.validation_samples == 5000 and len(tuning_study(study).cells) == 4 * len(t.lr)


@pytest.mark.parametrize("name", ["fashion-resnet8", "fashion-mobilenet", "licences-char-lstm"])
def test_each_committed_zoo_scenario_validates(name, tmp_path):
    """scenarios/zoo/: the Fashion-MNIST ones against Debian's files, the char-LSTM's against the
    licence texts benchmarks/make_leaf_text.py writes (one user per licence: its natural partition)."""
    from benchmarks import make_leaf_text
    from edgebed.cli import _validate_one
    from tests.capabilities import require
    overrides: tuple = ()
    if name.startswith("fashion"):
        require(Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists(), "Fashion-MNIST",
                "apt-get install dataset-fashion-mnist")
    else:
        made = make_leaf_text.make(Path(make_leaf_text.SOURCE), tmp_path / "leaf")
        overrides = (f"dataset.path={tmp_path / 'leaf' / 'train'}", f"dataset.test_path={tmp_path / 'leaf' / 'test'}")
        assert len(made["users"]) == load_scenario(ROOT / "scenarios" / "zoo" / f"{name}.yaml").workers.n
    out = _validate_one(ROOT / "scenarios" / "zoo" / f"{name}.yaml", overrides)
    assert out["ok"], out["errors"]
    assert "parameters" in out["describes"]
