"""`edgebed runs`: the numbers runs are compared by, runs inside study folders, a killed run shown as
killed (as `edgebed report` says), sorting and filters, and strict JSON."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from edgebed import cli
from edgebed.api import list_runs
from edgebed.rundir import RunWriter, write_json_atomic

pytestmark = pytest.mark.timeout(30)


def _run(parent, name, summary, algorithm="adacomp", c=0.05, n=4, rows=0, started="2026-11-20T10:00:00+0000"):
    run = parent / name
    run.mkdir(parents=True)
    (run / "scenario.yaml").write_text(f"name: {name.split('-')[0]}\nworkers: {{n: {n}}}\n"
                                       f"algorithm: {{name: {algorithm}, lr: 0.05, c: {c}}}\n")
    write_json_atomic(run / "manifest.json", {"started": started})
    write_json_atomic(run / "summary.json", summary)
    if rows:
        w = RunWriter(run)
        for i in range(1, rows + 1):
            w.append("updates", {"update": i, "wall_time": i / 10, "virtual_time": float("nan"), "device": 0,
                                 "speed_class": "a", "staleness": 0, "sigma_mean": 0.0, "sigma_max": 0.0,
                                 "entries": 10, "bytes_in": 100, "loss": 1.0})
        w.flush()
    return run


@pytest.fixture
def tree(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "quick-20261120-100000", {"status": "complete", "updates": 1500, "final_accuracy": 0.93,
                                          "ingress_bytes": 9_000_000, "wall_time_s": 42.0},
         started="2026-11-20T10:00:00+0000")
    killed = _run(runs, "quick-20261121-100000", {"status": "running", "engine": {"pid": os.getpid(), "start": 1}},
                  rows=7, started="2026-11-21T10:00:00+0000")
    write_json_atomic(killed / "traffic.json", {"ingress_bytes": 700})
    _run(runs, "asgd-20261119-100000", {"status": "failed", "updates": 0, "final_accuracy": float("nan"),
                                        "ingress_bytes": 0, "wall_time_s": 3.0},
         algorithm="asgd", started="2026-11-19T10:00:00+0000")
    study = tmp_path / "studies-out" / "st" / "runs" / "cell-1" / "seed-0"
    _run(study, "st-20261122-100000", {"status": "complete", "updates": 300, "final_accuracy": 0.8,
                                       "ingress_bytes": 50_000, "wall_time_s": 9.5}, n=200, c=0.01,
         started="2026-11-22T10:00:00+0000")
    return tmp_path


def test_rows_carry_n_c_ingress_start_and_duration_and_a_killed_run_is_killed(tree):
    df = list_runs([tree / "runs"]).set_index("run")
    done = df.loc["quick-20261120-100000"]
    assert (done.devices, done.c, done.ingress_bytes, done.wall_time_s) == (4, 0.05, 9_000_000, 42.0)
    assert done.started == "2026-11-20T10:00:00+0000"
    killed = df.loc["quick-20261121-100000"]
    # its engine (recorded with a start time no process has) is gone: killed, with what it recorded
    assert killed.status == "killed" and killed.updates == 7 and killed.ingress_bytes == 700
    assert pd.isna(df.loc["asgd-20261119-100000"].c)   # ASGD does not compress: no c


def test_runs_inside_study_folders_are_found(tree):
    df = list_runs([tree])
    assert "st-20261122-100000" in set(df.run) and len(df) == 4
    assert list_runs([tree / "studies-out"]).run.tolist() == ["st-20261122-100000"]


def test_sorted_by_start_by_default_and_by_any_key_with_filters(tree):
    assert list_runs([tree]).run.tolist() == ["asgd-20261119-100000", "quick-20261120-100000",
                                               "quick-20261121-100000", "st-20261122-100000"]
    assert list_runs([tree], sort="ingress").run.tolist()[-1] == "quick-20261120-100000"
    assert list_runs([tree], status="complete").run.tolist() == ["quick-20261120-100000", "st-20261122-100000"]
    assert list_runs([tree], algorithm="asgd").run.tolist() == ["asgd-20261119-100000"]
    assert list_runs([tree], match="st*").run.tolist() == ["st-20261122-100000"]


def test_json_is_strict_and_the_table_shows_the_new_columns(tree, capsys):
    assert cli.main(["runs", str(tree), "--json", "--sort", "accuracy"]) == 0
    text = capsys.readouterr().out

    def no_nan(name):
        raise AssertionError(f"{name} in JSON output")
    rows = json.loads(text, parse_constant=no_nan)
    failed = next(r for r in rows if r["run"] == "asgd-20261119-100000")
    assert failed["final_accuracy"] is None and failed["c"] is None
    assert [r["run"] for r in rows] == ["st-20261122-100000", "quick-20261120-100000",    # no value: last
                                        "asgd-20261119-100000", "quick-20261121-100000"]
    assert cli.main(["runs", str(tree)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["run", "status", "algorithm", "c", "n", "runtime", "updates", "final", "acc",
                                "PS", "ingress", "started", "duration"]
    st = next(line for line in table if line.strip().startswith("st-"))
    assert "200" in st and "0.01" in st and "2026-11-22 10:00" in st and "300" in st
    killed = next(line for line in table if line.strip().startswith("quick-20261121"))
    assert " killed " in killed
