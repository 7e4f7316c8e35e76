"""`edgebed clean` on a local run: only recorded PIDs that are still edgebed device agents die."""
import json
import subprocess
import sys
import time

import pytest

from edgebed.emulator import cleanup

pytestmark = pytest.mark.timeout(30)

# argv[1] puts the agent's module name into /proc/<pid>/cmdline, as `-m edgebed.device_agent` does
SLEEP = [sys.executable, "-c", "import time, sys; time.sleep(60)"]


def test_clean_kills_recorded_agents_only(tmp_path):
    agent = subprocess.Popen([*SLEEP, "edgebed.device_agent"])
    stopped = subprocess.Popen([*SLEEP, "edgebed.device_agent"])
    other = subprocess.Popen(SLEEP)             # recorded, but its PID now belongs to something else
    bystander = subprocess.Popen([*SLEEP, "edgebed.device_agent"])   # an agent of another run
    try:
        stopped.send_signal(19)                 # SIGSTOP: a frozen agent still gets killed
        (tmp_path / "pids.json").write_text(json.dumps({"pids": [agent.pid, stopped.pid, other.pid, 999999]}))
        report = cleanup.clean(tmp_path)
        assert sorted(report["processes"]["killed"]) == sorted([agent.pid, stopped.pid])
        assert agent.wait(5) == -9 and stopped.wait(5) == -9
        time.sleep(0.2)
        assert other.poll() is None and bystander.poll() is None
        assert "killed 2" in cleanup.describe(report)
        # idempotent
        again = cleanup.clean(tmp_path)
        assert again["processes"]["killed"] == []
    finally:
        for p in (agent, stopped, other, bystander):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_clean_of_missing_run_dir_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        cleanup.clean(tmp_path / "nope")
    assert cleanup.describe(cleanup.clean(tmp_path)) == "nothing recorded to clean"
