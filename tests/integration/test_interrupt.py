"""Ctrl-C / SIGTERM to `edgebed run` at several moments: a readable run directory marked incomplete."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from edgebed.rundir import TABLES, read_json, read_table

SCENARIO = """
name: intr
seed: 5
dataset: {train_samples: 1500, test_fraction: 0.1}
model: {name: mlp}
algorithm: {name: adacomp, lr: 0.05, c: 0.05}
workers:
  n: 3
  classes: [{name: default, share: 1.0, think_time: 20ms}]
stop: {updates: 100000, wall_time: 120s}
eval: {every: 50, test_samples: 200}
checkpoint: {every: 25}
"""


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _run_dir(out: Path):
    dirs = list(out.glob("intr-*"))
    return dirs[0] if dirs else None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


MOMENTS = {
    # the run directory exists, agents are being started
    "startup": lambda run: run is not None and (run / "summary.json").exists(),
    # updates and evaluations are being written
    "mid-run": lambda run: run is not None and len(list((run / "updates").glob("part-*.parquet"))) >= 2,
}


@pytest.mark.slow
@pytest.mark.parametrize("sig, moment", [(signal.SIGINT, "startup"), (signal.SIGTERM, "mid-run"),
                                         (signal.SIGINT, "mid-run")])
def test_interrupted_run_is_readable_and_marked_incomplete(tmp_path, sig, moment):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    proc = subprocess.Popen([sys.executable, "-m", "edgebed.cli", "run", "s.yaml", "--out", "runs"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    run = None
    try:
        _wait(lambda: MOMENTS[moment](_run_dir(tmp_path / "runs")), 60, moment)
        run = _run_dir(tmp_path / "runs")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        if run is not None:
            from edgebed.emulator.cleanup import clean
            clean(run)
    assert proc.returncode != 0
    summary = read_json(run, "summary.json")
    assert summary["status"] == "incomplete", (summary, out)
    assert "interrupted" in summary["reason"]
    # Whole files only: every Parquet part opens, no temporary file is left behind.
    assert not [p for p in run.rglob(".*tmp*")], list(run.rglob(".*tmp*"))
    for table in TABLES:
        for part in (run / table).glob("*.parquet"):
            pq.read_table(part)
        read_table(run, table)
    events = read_table(run, "events")
    assert moment == "startup" or "stop" in set(events.event)
    assert not any(_alive(p) for p in read_json(run, "pids.json").get("pids", []))   # no agent left running
    if moment == "mid-run":
        updates = read_table(run, "updates")
        assert len(updates) >= 1 and summary["updates"] >= updates["update"].max()
        report = subprocess.run([sys.executable, "-m", "edgebed.cli", "report", str(run), "--out",
                                 str(tmp_path / "report")], capture_output=True, text=True, timeout=120)
        assert report.returncode == 0, report.stderr
        assert (tmp_path / "report" / "report.md").exists()
