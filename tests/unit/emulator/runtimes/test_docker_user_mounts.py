"""The docker runtime mounts a user's model directory and data set into every device container,
read-only at their host paths (the device imports the module from the path its Welcome names)."""
from __future__ import annotations

import pytest

from edgebed.emulator.runtimes.docker.images import user_mounts
from edgebed.scenario import parse_scenario

pytestmark = pytest.mark.timeout(30)


def _sc(model: dict, dataset: dict):
    return parse_scenario({"name": "m", "workers": {"n": 2}, "stop": {"updates": 5}, "model": model,
                           "dataset": dataset, "runtime": {"name": "docker"}})


def test_the_model_directory_and_the_data_files_are_mounted_read_only(tmp_path):
    (tmp_path / "user").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.npz").write_bytes(b"")
    (tmp_path / "data" / "test.npz").write_bytes(b"")
    sc = _sc({"name": "unets.lin:linear", "path": str(tmp_path / "user")},
             {"format": "npz", "path": str(tmp_path / "data" / "train.npz"),
              "test_path": str(tmp_path / "data" / "test.npz")})
    mounts = user_mounts(sc, {})
    assert mounts == {str(tmp_path / "user"): {"bind": str(tmp_path / "user"), "mode": "ro"},
                      str(tmp_path / "data"): {"bind": str(tmp_path / "data"), "mode": "ro"}}
    # what the image already mounts (the project, /usr) is not mounted twice
    assert user_mounts(sc, {str(tmp_path): {"bind": str(tmp_path), "mode": "ro"}}) == {}


def test_the_built_ins_need_no_mount():
    assert user_mounts(_sc({"name": "cnn"}, {"source": "bundled"}), {}) == {}
