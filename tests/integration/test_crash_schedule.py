"""``failures.crash`` on real runtimes: exactly the scheduled devices crash, each with its first push at
or after its point; validate's preview and the run's summary and report say intended vs realised."""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml

from edgebed.analysis.report import write_report
from edgebed.emulator.engine import Engine
from edgebed.rundir import read_table
from edgebed.scenario import parse_scenario

SCENARIO = {
    "name": "crash-schedule", "seed": 4, "dataset": {"train_samples": 1000}, "model": {"name": "mlp"},
    "algorithm": {"name": "asgd", "lr": 0.05},
    "workers": {"n": 10, "classes": [{"name": "fast", "share": 0.5}, {"name": "slow", "share": 0.5, "slowdown": 3}]},
    "failures": {"crash": {"fraction": "20%", "between": [20, 100]}},
    "stop": {"updates": 200}, "eval": {"every": 100, "test_samples": 200}, "runtime": {"name": "sim"},
}


def _check(path, sc):
    sched = sc.crash_schedule()
    events = read_table(path, "events")
    crashes = events[events["event"] == "crash"]
    assert sorted(crashes["device"].astype(int)) == sorted(sched.at), "exactly the scheduled devices crashed"
    for row in crashes.itertuples():
        assert row.update >= sched.at[int(row.device)], "a crash comes with a push at or after its point"
    updates = read_table(path, "updates")
    for d in sched.at:   # and the device pushed nothing after it
        crashed_at = int(crashes.loc[crashes["device"] == d, "update"].iloc[0])
        assert updates.loc[updates["device"] == d, "update"].max() == crashed_at


@pytest.mark.timeout(60)
def test_the_virtual_clock_crashes_exactly_the_scheduled_devices(tmp_path):
    sc = parse_scenario(SCENARIO)
    assert sc.crash_schedule().intended == {"fast": 1, "slow": 1}
    result = Engine(sc, out=tmp_path / "runs").run()
    _check(result.path, sc)
    assert result.summary["crashes"] == {"form": "failures.crash", "unit": "updates",
                                         "intended": {"fast": 1, "slow": 1}, "realised": {"fast": 1, "slow": 1}}
    assert result.summary["devices"]["crashed"] == 2
    page = write_report([result.path], tmp_path / "report").html.read_text()
    assert "crashes intended → realised, per class" in page and "fast 1 → 1 · slow 1 → 1" in page


@pytest.mark.timeout(90)
def test_local_processes_crash_exactly_the_scheduled_devices(tmp_path):
    data = copy.deepcopy(SCENARIO)
    data.update(runtime={"name": "local"}, workers={**data["workers"], "n": 4})
    data["failures"]["crash"] = {"devices": 2, "between": [20, 100]}
    sc = parse_scenario(data)
    result = Engine(sc, out=tmp_path / "runs").run()
    _check(result.path, sc)
    assert result.summary["crashes"]["realised"] == sc.crash_schedule().intended == {"fast": 1, "slow": 1}


def test_the_probability_form_reports_what_happened_and_states_no_intent(tmp_path):
    data = copy.deepcopy(SCENARIO)
    data["failures"] = {"crash_probability": 0.02}
    result = Engine(parse_scenario(data), out=tmp_path / "runs").run()
    got = result.summary["crashes"]
    assert got["form"] == "failures.crash_probability" and got["intended"] is None
    assert sum(got["realised"].values()) == result.summary["devices"]["crashed"]


def test_validate_previews_the_crashes_per_class(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    out = subprocess.run([sys.executable, "-m", "edgebed.cli", "validate", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(line for line in lines if line.split()[:2] == ["class", "devices"])
    assert head.split()[-1] == "crashes"
    assert [line.split()[-1] for line in lines if line.split()[:1] in (["fast"], ["slow"])] == ["1", "1"]
    assert "failures.crash schedules 2 devices to crash" in out.stdout
    assert max(map(len, lines[1:])) <= 80
