"""edgebed as a library: a run, a study and the ingress-to-target question, started and answered in
Python alone (sim runtime, seconds); an interrupt behaves as Ctrl-C on the console does."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import edgebed
from edgebed.scenario import ScenarioError

ROOT = Path(__file__).resolve().parents[2]


def small(name: str = "api", **algorithm) -> dict:
    """A scenario as a mapping, as in a YAML file: 6 MLP devices on the virtual clock, 300 updates."""
    return {"name": name, "seed": 1, "dataset": {"train_samples": 2000}, "model": {"name": "mlp"},
            "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10, **algorithm},
            "workers": {"n": 6}, "stop": {"updates": 300}, "eval": {"every": 50, "test_samples": 300},
            "runtime": {"name": "sim", "sim": {"threads": 1}}}


@pytest.mark.timeout(180)
def test_run_compare_and_ingress_to_target_in_python(tmp_path):
    runs = [edgebed.run(small(), overrides={"seed": s, "algorithm.name": a, **({"algorithm.c": 0.05} if a == "adacomp" else {})},
                        out=tmp_path, progress=False)
            for a in ("asgd", "adacomp") for s in (1, 2)]
    assert [r.status for r in runs] == ["complete"] * 4
    assert runs[2].scenario["algorithm"]["name"] == "adacomp" and runs[3].scenario["seed"] == 2
    per_run = edgebed.ingress_to_target(runs, 0.3)
    assert list(per_run["group"]) == ["asgd", "asgd", "adacomp c=0.05", "adacomp c=0.05"]
    assert per_run["reached"].all()   # 300 MLP updates pass 30 % test accuracy
    # the number is the run's own: PS ingress at the first evaluation at or above the target
    first = runs[0].evals[runs[0].evals["accuracy"] >= 0.3].iloc[0]
    assert per_run["updates_to_target"].iloc[0] == first["update"]
    assert per_run["ingress_to_target"].iloc[0] == first["ingress_bytes"]
    table = edgebed.compare(runs, baseline="asgd", target=0.3).set_index("cell")
    ada = table.loc["adacomp c=0.05"]
    assert ada["reached"] == 2 and ada["ratio_pairs"] == 2
    assert ada["ratio_min"] <= ada["ingress_ratio"] <= ada["ratio_max"]
    assert ada["ingress_ratio"] > 1.5          # sparse pushes: less ingress to the same accuracy
    assert table.loc["asgd", "ingress_ratio"] == 1.0
    with pytest.raises(edgebed.api.ReportError, match="names no group"):
        edgebed.compare(runs, baseline="sgd", target=0.3)


def test_bad_input_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ScenarioError, match="workers"):
        edgebed.run(small(), overrides={"workers.n": 0}, out=tmp_path, progress=False)
    with pytest.raises(ScenarioError, match="mapping"):
        edgebed.run(small(), overrides="seed=2", out=tmp_path, progress=False)
    assert not any(tmp_path.iterdir())


@pytest.mark.timeout(240)
def test_a_study_runs_resumes_and_answers_with_seed_ranges(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(small("api-base")))
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({
        "name": "api-study", "base": "base.yaml", "seeds": 2, "target": 0.3, "baseline": "asgd",
        "cells": [{"label": "asgd", "set": {"algorithm.name": "asgd"}},
                  {"label": "adacomp", "set": {"algorithm.name": "adacomp", "algorithm.c": 0.05}}]}))
    first = edgebed.run_study(tmp_path / "study.yaml", out=tmp_path / "out", progress=False)
    assert (first.status["complete"], first.status["total"]) == (4, 4)
    again = edgebed.run_study(tmp_path / "study.yaml", out=tmp_path / "out", progress=False)
    assert (again.status["complete"], again.status["skipped"]) == (0, 4)   # resumed: nothing ran again
    t = again.targets().set_index("label")
    assert t.loc["adacomp", "reached"] == 2 and t.loc["adacomp", "ingress_ratio"] > 1.5
    assert t.loc["adacomp", "ratio_min"] <= t.loc["adacomp", "ingress_ratio"] <= t.loc["adacomp", "ratio_max"]
    assert len(again.runs()) == 4
    rep = again.report()
    assert rep.html.is_file()


DRIVER = """
import json, sys
import edgebed
sc = {"name": "api-int", "seed": 1, "dataset": {"train_samples": 2000}, "model": {"name": "mlp"},
      "algorithm": {"name": "asgd", "lr": 0.05, "batch_size": 10}, "workers": {"n": 4},
      "stop": {"updates": 10000000}, "eval": {"every": 200, "test_samples": 200},
      "runtime": {"name": "sim", "sim": {"threads": 1}}}
try:
    edgebed.run(sc, out=sys.argv[1], progress=False)
except edgebed.RunInterrupted as stop:
    print(json.dumps({"caught": type(stop).__name__, "is_keyboard_interrupt": isinstance(stop, KeyboardInterrupt),
                      "status": stop.run.status, "updates": stop.run.summary.get("updates"),
                      "rows": len(stop.run.updates)}))
"""


@pytest.mark.timeout(120)
def test_keyboard_interrupt_closes_the_run_and_raises_with_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob("api-int-*/updates")):
        time.sleep(0.2)
    time.sleep(1.0)                       # some updates recorded
    proc.send_signal(signal.SIGINT)       # what a notebook's stop button and Ctrl-C send
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["caught"] == "RunInterrupted" and got["is_keyboard_interrupt"]
    assert got["status"] == "incomplete" and got["updates"] == got["rows"] > 0
