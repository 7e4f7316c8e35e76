"""The layer order in pyproject.toml ([tool.importlinter]) holds, and an arrow back up breaks it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
LINT = str(Path(sys.executable).with_name("lint-imports"))


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=100)


def test_the_package_keeps_its_layers():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "0 broken" in out.stdout


def test_an_import_from_a_lower_layer_up_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "edgebed", tmp_path / "edgebed", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    units = tmp_path / "edgebed" / "units.py"
    units.write_text(units.read_text() + "\nfrom . import cli  # noqa: E402,F401  (the back-arrow under test)\n")
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert "edgebed.units is not allowed to import edgebed.cli" in out.stdout
