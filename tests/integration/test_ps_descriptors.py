"""A run under ``ulimit -n 1024`` outlives more raw TCP connections to its PS than it has descriptors.

Issue 36, point 1: connections that never begin a ZeroMQ handshake each hold one of the engine's
descriptors until libzmq's handshake timeout (30 s); 1,083 of them filled its file table and the next
write of the updates table failed ("Too many open files"), ending the run ``failed``. The PS now caps
the connections it holds below the descriptor limit (ps/fdbudget.py), so the run ends complete and
its honest devices keep training during the flood.
"""
from __future__ import annotations

import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgebed.rundir import read_json, read_table
from tests.integration.runproc import end_run, run_dir, update_parts, wait_for

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]   # a live run of ~25 s

LIMIT = 1024            # the common `ulimit -n`
RAW_CONNECTIONS = 1100  # more than the engine has descriptors
SCENARIO = """
name: fds
seed: 4
dataset: {train_samples: 1200, test_fraction: 0.1}
model: {name: mlp}
algorithm: {name: adacomp, lr: 0.05, c: 0.05}
workers:
  n: 2
  classes: [{name: default, share: 1.0, think_time: 30ms}]
stop: {wall_time: 25s}
eval: {every: 200, test_samples: 200}
checkpoint: {every: 5}
"""


def _limited() -> None:   # in the run's process, before exec: soft and hard limit both 1024
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def test_a_run_under_ulimit_1024_outlives_1100_raw_connections(tmp_path: Path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    proc = subprocess.Popen([sys.executable, "-m", "edgebed.cli", "run", "s.yaml", "--out", "runs"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=_limited)
    run, socks = None, []
    try:
        run = wait_for(lambda: (r := run_dir(tmp_path, "fds")) and (r / "endpoint.json").exists()
                       and update_parts(r) >= 1 and r, 60, "the run's first updates", proc)
        host, port = read_json(run, "endpoint.json")["bind"].rsplit("/", 1)[-1].rsplit(":", 1)
        flood_from = float(read_table(run, "updates")["wall_time"].max())
        for _ in range(RAW_CONNECTIONS):   # TCP connected, not a byte of ZMTP sent: held until the handshake times out
            s = socket.socket()
            s.settimeout(5)
            try:
                s.connect((host, int(port)))
            except OSError:   # the PS's backlog is full for a moment: the flood goes on
                s.close()
                continue
            socks.append(s)
        time.sleep(3)     # the table's next flushes and checkpoints happen with the flood held open
        out, _ = proc.communicate(timeout=90)
        summary = read_json(run, "summary.json")
        assert summary["status"] == "complete", (summary, out[-3000:])
        updates = read_table(run, "updates")
        assert len(updates) == summary["updates"]
        during = updates[updates["wall_time"] > flood_from]
        assert set(during["device"]) == {0, 1} and (during.groupby("device").size() >= 10).all(), \
            during.groupby("device").size()
    finally:
        for s in socks:
            s.close()
        end_run(proc, run)
