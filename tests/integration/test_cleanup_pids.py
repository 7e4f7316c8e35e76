"""`edgebed clean` on a local run: only processes provably recorded by that run die (PID + start time)."""
import json
import subprocess
import sys
import time

import pytest

from edgebed import procs, rundir
from edgebed.emulator import cleanup

pytestmark = pytest.mark.timeout(30)

# argv[1] puts the agent's module name into /proc/<pid>/cmdline, as every fork-server child has it
SLEEP = [sys.executable, "-c", "import time, sys; time.sleep(60)", "edgebed.device_agent"]


def _started(n: int) -> list:
    ps = [subprocess.Popen(SLEEP) for _ in range(n)]
    deadline = time.monotonic() + 5
    while any(procs.start_time(p.pid) is None for p in ps) and time.monotonic() < deadline:
        time.sleep(0.01)
    return ps


def test_clean_kills_recorded_agents_only(tmp_path):
    agent, stopped, reused, bystander = _started(4)
    try:
        stopped.send_signal(19)                 # SIGSTOP: a frozen agent still gets killed
        fake_reuse = {"pid": reused.pid, "start": procs.start_time(reused.pid) - 1}   # same PID, other process
        (tmp_path / "pids.json").write_text(json.dumps({"procs": [
            procs.identity(agent.pid), procs.identity(stopped.pid), fake_reuse, {"pid": 999999, "start": 1}]}))
        report = cleanup.clean(tmp_path)
        assert sorted(report["processes"]["killed"]) == sorted([agent.pid, stopped.pid])
        assert agent.wait(5) == -9 and stopped.wait(5) == -9
        time.sleep(0.2)
        # Same command line as an agent, but not provably this run's: another run's agent stays alive.
        assert reused.poll() is None and bystander.poll() is None
        assert "killed 2" in cleanup.describe(report)
        again = cleanup.clean(tmp_path)           # idempotent
        assert again["processes"]["killed"] == []
    finally:
        for p in (agent, stopped, reused, bystander):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_bare_pids_of_an_old_run_dir_prove_nothing(tmp_path):
    (other,) = _started(1)
    try:
        (tmp_path / "pids.json").write_text(json.dumps({"pids": [other.pid]}))
        assert cleanup.clean(tmp_path)["processes"]["killed"] == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_run_whose_engine_died_is_killed_not_running(tmp_path):
    (engine,) = _started(1)
    run = tmp_path / "r-1"
    run.mkdir()
    (run / "scenario.yaml").write_text("name: r\n")
    rundir.write_json_atomic(run / "summary.json", {"status": "running", "engine": procs.identity(engine.pid)})
    assert rundir.run_status(run) == "running"
    engine.kill()
    engine.wait()
    assert rundir.run_status(run) == "killed"
    report = cleanup.clean(run)
    assert report["status"] == "killed" and "marked killed" in cleanup.describe(report)
    assert rundir.read_json(run, "summary.json")["status"] == "killed"


def test_clean_all_is_scoped_by_run_id_prefix(tmp_path):
    """clean --all over a tree of run directories; the prefix keeps other runs (here: a live one) out."""
    mine, theirs = _started(2)
    try:
        for name, proc in (("hyg-test-a-20250101-000000", mine), ("other-20250101-000000", theirs)):
            run = tmp_path / "runs" / name
            run.mkdir(parents=True)
            (run / "scenario.yaml").write_text("name: x\n")
            rundir.write_json_atomic(run / "summary.json", {"status": "complete"})
            rundir.write_json_atomic(run / "pids.json", {"procs": [procs.identity(proc.pid)]})
        out = cleanup.clean_all([tmp_path / "runs"], run_id_prefix="hyg-test-", docker_objects=False)
        assert list(out["runs"]) == ["hyg-test-a-20250101-000000"]
        assert mine.wait(5) == -9
        assert theirs.poll() is None
        assert "killed 1" in cleanup.describe_all(out)
    finally:
        for p in (mine, theirs):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_clean_of_missing_run_dir_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        cleanup.clean(tmp_path / "nope")
    assert cleanup.describe(cleanup.clean(tmp_path)) == "nothing recorded to clean"


def test_wait_blocked_sees_a_process_hold_sigterm():
    """procs.wait_blocked (the docker runtime waits on it before handing out a container's handle)."""
    import signal
    holder = subprocess.Popen([sys.executable, "-c", "import signal, time\ntime.sleep(0.3)\n"
                               "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\ntime.sleep(30)"])
    plain = subprocess.Popen(["sleep", "30"])
    try:
        assert procs.wait_blocked(holder.pid, signal.SIGTERM, timeout=10)
        holder.terminate()                     # held: it stays alive
        time.sleep(0.2)
        assert holder.poll() is None
        t0 = time.monotonic()
        assert not procs.wait_blocked(plain.pid, signal.SIGTERM, timeout=0.2)
        assert 0.2 <= time.monotonic() - t0 < 2
    finally:
        for p in (holder, plain):
            p.kill()
            p.wait(5)
    assert not procs.wait_blocked(plain.pid, signal.SIGTERM, timeout=5)   # gone: False at once
