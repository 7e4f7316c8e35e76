"""`edgebed clean` of a run that is still going: it says so, ends the run through its engine, and the run
is recorded as ended by `clean` — never "complete" — with a summary that agrees with its tables."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from edgebed.rundir import read_json, read_table
from tests.integration.runproc import end_run, run_dir, small_run, start_run, update_parts, wait_for

SCENARIO = small_run("live", think="10ms", stop="{updates: 4000, wall_time: 90s}", every=100)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_clean_of_a_live_run_says_so_and_records_it_ended_by_clean(tmp_path):
    proc = start_run(tmp_path, SCENARIO)
    run = None
    try:
        wait_for(lambda: update_parts(run_dir(tmp_path, "live")) >= 2, 120, "the run's first updates", proc)
        run = run_dir(tmp_path, "live")
        clean = subprocess.run([sys.executable, "-m", "edgebed.cli", "clean", str(run)], capture_output=True,
                               text=True, timeout=120)
        out, _ = proc.communicate(timeout=60)
    finally:
        end_run(proc, run)
    assert clean.returncode == 0, clean.stderr
    assert "was still running" in clean.stdout and "ended by `edgebed clean`" in clean.stdout, clean.stdout
    summary = read_json(run, "summary.json")
    assert summary["status"] == "incomplete", summary
    assert summary["reason"].startswith("ended by `edgebed clean`"), summary["reason"]
    assert summary["updates"] == len(read_table(run, "updates")) > 0
    assert proc.returncode == 1, out[-2000:]            # not 0: the run did not complete
    listed = json.loads(subprocess.run([sys.executable, "-m", "edgebed.cli", "runs", str(run), "--json"],
                                       capture_output=True, text=True, timeout=60).stdout)
    assert listed[0]["status"] == "incomplete" and listed[0]["updates"] == summary["updates"]
