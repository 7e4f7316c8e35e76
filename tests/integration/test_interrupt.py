"""Ctrl-C / SIGTERM to `edgebed run` at several moments: a readable run directory marked incomplete."""
from __future__ import annotations

import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from edgebed.rundir import TABLES, read_json, read_table
from tests.integration.runproc import alive, end_run, run_dir, small_run, start_run, update_parts, wait_for

SCENARIO = small_run("intr", train=1500, stop="{updates: 100000, wall_time: 120s}", test=200,
                     after="checkpoint: {every: 25}\n")


MOMENTS = {
    # the run directory exists, agents are being started
    "startup": lambda run: run is not None and (run / "summary.json").exists(),
    # updates and evaluations are being written
    "mid-run": lambda run: update_parts(run) >= 2,
}


@pytest.mark.slow
@pytest.mark.parametrize("sig, moment", [(signal.SIGINT, "startup"), (signal.SIGTERM, "mid-run"),
                                         (signal.SIGINT, "mid-run")])
def test_interrupted_run_is_readable_and_marked_incomplete(tmp_path, sig, moment):
    proc = start_run(tmp_path, SCENARIO)
    run = None
    try:
        wait_for(lambda: MOMENTS[moment](run_dir(tmp_path, "intr")), 60, moment, proc)
        run = run_dir(tmp_path, "intr")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        end_run(proc, run)
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
    assert not any(alive(p) for p in read_json(run, "pids.json").get("pids", []))   # no agent left running
    if moment == "mid-run":
        updates = read_table(run, "updates")
        assert len(updates) >= 1 and summary["updates"] >= updates["update"].max()
        report = subprocess.run([sys.executable, "-m", "edgebed.cli", "report", str(run), "--out",
                                 str(tmp_path / "report")], capture_output=True, text=True, timeout=120)
        assert report.returncode == 0, report.stderr
        assert (tmp_path / "report" / "report.md").exists()
