"""Bursts of Ctrl-C at random moments to a real `edgebed run`: the first press is acknowledged at once,
later ones are explained, and whatever arrives when, summary.json agrees with the run's tables.

A researcher presses Ctrl-C two or three times 0.3 s apart when the first press seems to do nothing;
the second press used to cut the teardown short and leave a summary saying "0 updates, interrupted
during set-up" beside an updates table of hundreds of rows."""
from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from edgebed.api import list_runs
from edgebed.rundir import read_json, read_table
from tests.integration.runproc import end_run, run_dir, small_run, start_run, update_parts, wait_for

SCENARIO = small_run("burst", think="10ms", stop="{updates: 4000, wall_time: 60s}", every=40)

ACK_WITHIN = 2.0   # seconds from the first press to the line saying the run is stopping

# (when the burst starts, presses, seconds between presses): set-up, the first rows, a running run
BURSTS = [("setup", 3, 0.3), ("first-rows", 2, 0.3), ("running", 3, 0.3), ("running", 2, 0.05)]


def _moment(tmp, which: str, proc):
    if which == "setup":   # the run directory exists; agents are being started
        wait_for(lambda: (r := run_dir(tmp, "burst")) and (r / "summary.json").exists(), 60, which, proc)
    else:
        need = 1 if which == "first-rows" else 3
        wait_for(lambda: update_parts(run_dir(tmp, "burst")) >= need, 90, which, proc)
    return run_dir(tmp, "burst")


def _agrees(run) -> list[str]:
    """How the run's summary disagrees with its tables and with `edgebed runs` (empty if it doesn't)."""
    summary = read_json(run, "summary.json")
    updates, events = read_table(run, "updates"), read_table(run, "events")
    wrong = []
    if summary.get("status") != "incomplete":
        wrong.append(f"status {summary.get('status')!r}, not 'incomplete'")
    if summary.get("updates") != len(updates):
        wrong.append(f"summary says {summary.get('updates')} updates, the updates table holds {len(updates)} rows")
    if len(updates) and int(updates["update"].max()) != len(updates):
        wrong.append(f"updates table: {len(updates)} rows but the last is update {updates['update'].max()}")
    if len(updates) and "during set-up" in str(summary.get("reason")):
        wrong.append(f"reason {summary.get('reason')!r} with {len(updates)} updates recorded")
    if len(updates) and "stop" not in set(events.event):
        wrong.append("updates were applied but no stop event was recorded")
    listed = list_runs([run.parent]).set_index("run").loc[run.name]
    if listed["updates"] != summary.get("updates") or listed["status"] != "incomplete":
        wrong.append(f"`edgebed runs` shows {listed['status']} / {listed['updates']} updates")
    return wrong


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bursts_of_ctrl_c_leave_a_summary_that_agrees_with_the_tables(tmp_path):
    rng = random.Random(int(os.environ.get("EDGEBED_SIGNAL_SEED", "28")))
    outcomes = []
    for k, (moment, presses, gap) in enumerate(BURSTS):
        tmp = tmp_path / f"b{k}"
        tmp.mkdir()
        proc = start_run(tmp, SCENARIO)
        lines: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), ln) for ln in proc.stdout))
        reader.start()
        run = None
        try:
            run = _moment(tmp, moment, proc)
            time.sleep(rng.uniform(0.0, 0.6))   # a random moment within the phase
            sent, first = [], time.monotonic()
            for i in range(presses):
                if i:
                    time.sleep(gap)
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    sent.append(time.monotonic())
            proc.wait(timeout=90)
            reader.join(10)
        finally:
            end_run(proc, run)
        out = "".join(ln for _, ln in lines)
        outcomes.append((moment, presses, proc.returncode, read_json(run, "summary.json").get("updates")))
        assert proc.returncode == 130, out[-3000:]
        # acknowledged at once, and a second press told what it does
        ack = [t for t, ln in lines if ln.startswith("Ctrl-C: stopping")]
        assert ack and ack[0] - first < ACK_WITHIN, out[-3000:]
        # a later press while the run was still closing is answered too (one landing as the process
        # exits, after its summary was printed, is ignored: there is nothing left to stop)
        closed = next((t for t, ln in lines if ln.startswith("incomplete:")), float("inf"))
        if any(t < closed for t in sent[1:]):
            assert "already stopping" in out, out[-3000:]
        wrong = _agrees(run)
        assert not wrong, f"burst {moment} × {presses}: " + "; ".join(wrong) + "\n" + out[-3000:]
    print("\n(moment, presses, exit code, updates):", outcomes)
