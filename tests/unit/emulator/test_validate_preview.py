"""`edgebed validate` says what a scenario will run per class and what is wrong where: devices and the
expected share / rate / staleness per class, a warning for a class with no device, errors of a --set
blamed on the --set, `runtime: sim` answered with the fix, corrupt dataset files refused before a
run; and reading a run from Python imports no plotting stack."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgebed import cli

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[3]
QUICK = str(ROOT / "scenarios" / "quickstart.yaml")


def test_devices_and_expected_share_rate_staleness_per_class(capsys):
    assert cli.main(["validate", QUICK]) == 0
    out = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(out) if line.split() == ["class", "devices", "share", "rate/device",
                                                                    "staleness"])
    rows = {line.split()[0]: line.split() for line in out[head + 1:head + 4]}
    assert [rows[c][1] for c in ("fast", "medium", "slow")] == ["7", "10", "7"]   # 30/40/30 % of 24
    shares = [float(rows[c][2]) for c in ("fast", "medium", "slow")]
    assert abs(sum(shares) - 100) < 0.5 and shares[0] > shares[1] > shares[2]   # faster class, larger share
    stale = [float(rows[c][6]) for c in ("fast", "medium", "slow")]
    assert stale[0] < stale[1] < stale[2]          # the slower a class, the staler its updates
    assert all(len(line) <= 80 for line in out[head - 1:head + 4]), out


def test_a_class_without_devices_is_warned_of(capsys):
    assert cli.main(["validate", QUICK, "--set", "workers.n=2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)[0]
    assert [c["devices"] for c in r["classes"]] == [1, 1, 0]
    assert any("'slow': 0 of the 2 devices" in w and "raise workers.n to at least 3" in w for w in r["warnings"])


def test_errors_of_a_set_blame_the_set_and_a_bare_runtime_name_gets_the_fix(tmp_path, capsys):
    assert cli.main(["validate", QUICK, "--set", "algorithm.c=2"]) == 2
    err = capsys.readouterr().err
    assert f"--set 'algorithm.c=2' (on {QUICK}): algorithm.c:" in err
    assert cli.main(["validate", QUICK, "--set", "runtime=sim"]) == 2
    assert "write --set runtime.name=sim" in capsys.readouterr().err
    f = tmp_path / "s.yaml"
    f.write_text(Path(QUICK).read_text().replace("runtime:\n  name: local", "runtime: sim"))
    assert cli.main(["validate", str(f)]) == 2
    assert f"{f}: runtime: 'sim' is a name, and runtime is a section: write `runtime: {{name: sim}}`" in \
        capsys.readouterr().err


def test_a_directory_of_corrupt_dataset_files_is_refused_before_the_run(tmp_path, capsys):
    data = tmp_path / "mnist"
    data.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (data / name).write_bytes(b"PK\x03\x04 definitely not IDX" * 10)
    f = tmp_path / "s.yaml"
    f.write_text(Path(QUICK).read_text().replace("  source: bundled", f"  source: path\n  path: {data}"))
    assert cli.main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert "not an IDX file (bad magic)" in err and "dataset.path" in err
    run = subprocess.run([sys.executable, "-m", "edgebed.cli", "run", str(f), "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=110)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "not an IDX file (bad magic)" in run.stderr
    assert not list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else True


def test_reading_a_run_imports_no_plotting_stack():
    code = ("import sys, edgebed; edgebed.load_run; edgebed.list_runs; "
            "print(sorted(m for m in ('matplotlib', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
