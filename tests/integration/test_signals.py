"""SIGINT at random moments (start-up included) and SIGKILL of `edgebed run`: no process is left behind.

Every process of a run — the engine, the fork server, the resource tracker, the evaluator, each agent —
inherits the environment, so a unique tag there finds all of them, however they were started.
"""
from __future__ import annotations

import os
import random
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from edgebed.emulator import cleanup
from edgebed.rundir import read_json, read_table, run_status
from tests.integration.runproc import kill_group, run_dir, small_run, start_run, update_parts, wait_for

SCENARIO = small_run("sig", after="checkpoint: {every: 10}\n")
MOMENTS = 6       # 0 s and five random moments: start-up, agents starting, the first updates, mid-run
LATEST = 9.0     # seconds after the start: imports, fork server, agents starting, the first updates


def _tagged(tag: str) -> list[tuple[int, str]]:
    """(pid, command) of every live process whose environment carries ``tag``."""
    found = []
    needle = f"EDGEBED_TEST_TAG={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle not in Path(f"/proc/{entry}/environ").read_bytes():
                continue
            stat = Path(f"/proc/{entry}/stat").read_text()
            if stat[stat.rindex(")") + 2] in "ZX":
                continue
            found.append((int(entry), Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]))
        except OSError:
            continue
    return found


def _none_left(tag: str, within: float = 10.0) -> list:
    deadline = time.monotonic() + within
    while (left := _tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _start(tmp: Path, tag: str):
    return start_run(tmp, SCENARIO, env={**os.environ, "EDGEBED_TEST_TAG": tag})


def _kill_tagged(tag: str) -> None:
    for pid, _ in _tagged(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _sigint_at(tmp: Path, delay: float) -> tuple:
    """Start a run, SIGINT it ``delay`` s later; (delay, exit code, status), having checked that no
    process of it is left and that it is recorded incomplete (or never made its directory)."""
    tag = uuid.uuid4().hex
    proc = _start(tmp, tag)
    try:
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        left = _none_left(tag)
    finally:
        kill_group(proc)
        _kill_tagged(tag)
    run = run_dir(tmp, "sig")
    status = read_json(run, "summary.json").get("status") if run else "no run dir yet"
    assert left == [], f"SIGINT {delay:.2f} s after start left {left}\n{out[-2000:]}"
    assert proc.returncode != 0, out[-2000:]
    assert status in ("incomplete", "no run dir yet"), (delay, status, out[-2000:])
    return round(delay, 2), proc.returncode, status


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigint_at_six_random_moments_leaves_no_process(tmp_path):
    rng = random.Random(int(os.environ.get("EDGEBED_SIGNAL_SEED", "11")))
    delays = [0.0] + sorted(rng.uniform(0.05, LATEST) for _ in range(MOMENTS - 1))   # 0: right at start-up
    dirs = [tmp_path / f"m{k}" for k in range(MOMENTS)]
    for d in dirs:
        d.mkdir()
    # two runs at a time (each tagged, so each finds only its own processes): the waits overlap
    with ThreadPoolExecutor(2) as lanes:
        outcomes = list(lanes.map(_sigint_at, dirs, delays))
    print("\n(delay s, exit code, status):", outcomes)


@pytest.mark.timeout(120)
def test_sigkill_of_the_engine_leaves_no_process_and_the_run_shows_killed(tmp_path):
    tag = uuid.uuid4().hex
    proc = _start(tmp_path, tag)
    try:
        run = wait_for(lambda: update_parts(run_dir(tmp_path, "sig")) >= 1 and run_dir(tmp_path, "sig"), 60,
                       "the run's first updates", proc)
        assert len(_tagged(tag)) >= 5            # engine, fork server, tracker, evaluator, agents
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        left = _none_left(tag)
    finally:
        kill_group(proc)
        _kill_tagged(tag)
    assert left == [], f"SIGKILL of the engine left {left}"
    assert read_json(run, "summary.json")["status"] == "running"   # nobody could write otherwise
    assert run_status(run) == "killed"
    # `edgebed runs` and `edgebed report` (load_run) agree: killed, with the updates it recorded
    from edgebed.analysis.runs import load_run
    from edgebed.api import list_runs
    listed = list_runs([run]).iloc[0]
    assert listed["status"] == load_run(run).summary["status"] == "killed"
    assert listed["updates"] == len(read_table(run, "updates"))
    report = cleanup.clean(run)
    assert report.get("status") == "killed" and read_json(run, "summary.json")["status"] == "killed"
    assert len(read_table(run, "updates")) >= 1                    # what was recorded is kept
