"""PS restart with a real kill, agents rejoining a restarted PS, and a frozen (SIGSTOPped) device."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import zmq

from edgebed.ps.rules import RULES
from edgebed.ps.serve import ZmqServer
from edgebed.ps.server import ParameterServer, PSConfig
from edgebed.rundir import read_json, read_table
from tests.integration.runproc import alive, edgebed, end_run, kill_group, run_dir, small_run, start_run, wait_for

SCENARIO = small_run("small", seed=3, train=1500, before_stop="failures: {lost_after: 3s}\n",
                     stop="{updates: %(updates)d, wall_time: 80s}", every=100, test=200,
                     after="checkpoint: {every: %(every)d}\n")


@pytest.mark.slow
def test_killed_engine_resumes_from_checkpoint(tmp_path):
    first = start_run(tmp_path, SCENARIO % {"updates": 300, "every": 30})
    run = second = None
    try:
        run = wait_for(lambda: run_dir(tmp_path, "small"), 30, "the run directory", first)
        ckpt = run / "checkpoint" / "ps.npz"
        wait_for(lambda: ckpt.exists() and len(read_table(run, "updates")) >= 60, 60, "a checkpoint + 60 updates",
                 first)
        old_pids = read_json(run, "pids.json")["pids"]
        endpoint = read_json(run, "endpoint.json")
        kill_group(first)                      # SIGKILL: no clean-up, no summary
        assert read_json(run, "summary.json")["status"] == "running"
        # The agents die with their engine (fork server gone → parent-death signal), nothing is orphaned.
        wait_for(lambda: not any(alive(p) for p in old_pids), 10, "the old agents to die with their engine")

        second = edgebed("run", "--resume", str(run), cwd=tmp_path)
        out, _ = second.communicate(timeout=90)
        assert second.returncode == 0, out
    finally:
        kill_group(first)
        end_run(second if second is not None else first, run)

    summary = read_json(run, "summary.json")
    assert summary["status"] == "complete" and summary["updates"] == 300, summary
    events = read_table(run, "events")
    resume = events[events.event == "resume"]
    assert len(resume) == 1 and "PS restarted from the checkpoint at update" in resume.detail.iloc[0]
    assert "0 old agent processes ended" in resume.detail.iloc[0]
    restarted_at = int(resume["update"].iloc[0])
    assert restarted_at > 0 and restarted_at % 30 == 0
    # The same endpoint (so surviving devices could reconnect); the new agents said hello with attempt 1.
    assert read_json(run, "endpoint.json")["bind"] == endpoint["bind"]
    hellos = events[(events.event == "hello") & (events.wall_time > resume.wall_time.iloc[0])]
    assert len(hellos) == 3 and all(d.startswith("attempt=1") for d in hellos.detail)
    assert not any(alive(p) for p in old_pids)
    # Every update index up to the stop was recorded; the ones after the checkpoint appear twice.
    updates = read_table(run, "updates")
    assert set(range(1, 301)) <= set(updates["update"])
    assert updates.wall_time.max() > resume.wall_time.iloc[0]
    assert (tmp_path / "runs").is_dir() and len(list((tmp_path / "runs").iterdir())) == 1


def test_agent_rejoins_a_restarted_ps_with_attempt_plus_one(tmp_path):
    """The PS disappears (no reply) and comes back on the same port without the session."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bind = f"tcp://127.0.0.1:{port}"
    (tmp_path / "agent.py").write_text(textwrap.dedent(f"""
        import numpy as np
        from edgebed.device_agent.agent import run_agent
        rng = np.random.default_rng(0)
        data = (rng.integers(0, 255, (200, 28, 28), dtype=np.uint8), rng.integers(0, 10, 200, dtype=np.uint8))
        raise SystemExit(run_agent("{bind}", 0, data=data))
    """))
    theta_size = 199_210   # the MLP

    def make_ps():
        from edgebed.emulator.welcome import welcome_config
        from edgebed.scenario import parse_scenario
        sc = parse_scenario({"name": "t", "model": {"name": "mlp"}, "workers": {"n": 1},
                             "algorithm": {"name": "asgd"}, "stop": {"updates": 10**6}})
        theta = np.zeros(theta_size, dtype=np.float32)
        return ParameterServer(PSConfig(n_devices=1, welcome=lambda d: welcome_config(sc, d, "dense", {}),
                                        class_of=lambda d: "default"), theta, RULES["asgd"](theta, 0.01))

    ctx = zmq.Context()
    ps1 = make_ps()
    server = ZmqServer(ps1, bind, context=ctx).start()
    env = {**os.environ, "EDGEBED_PS_TIMEOUT": "1", "EDGEBED_RECONNECT_FOR": "30"}
    agent = subprocess.Popen([sys.executable, str(tmp_path / "agent.py")], env=env, cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    server2 = None
    try:
        wait_for(lambda: ps1.version >= 3, 60, "pushes to the first PS")
        server.stop()                          # the PS is gone: no replies at all
        time.sleep(2.5)
        ps2 = make_ps()                        # restarted: same endpoint, no sessions
        server2 = ZmqServer(ps2, bind, context=ctx).start()
        wait_for(lambda: ps2.version >= 3, 60, "pushes to the restarted PS")
        assert agent.poll() is None            # the agent did not die
        assert ps2.devices[0].attempt >= 1     # it said hello again, as a new attempt
        ps2.request_stop("test over")
        assert agent.wait(30) == 0, agent.stdout.read()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(5)
        agent.stdout.close()
        if server2:
            server2.stop()
        ctx.term()


@pytest.mark.slow
def test_sigstopped_agent_is_recorded_lost_and_the_run_still_ends(tmp_path):
    # The run must outlast lost_after (3 s) after the freeze on any host, so its length is bounded by
    # the think time, not by the host's speed: after the freeze (≥ 10 updates in) the two devices left,
    # 50 ms of think time each, push at most 40 updates/s, so the last 290 take at least 7 s.
    # (Unpaced, 400 updates finished 2.2 s after the freeze on an idle 2-core host: no loss recorded.)
    updates = 300
    proc = start_run(tmp_path, SCENARIO.replace("think_time: 20ms", "think_time: 50ms")
                     % {"updates": updates, "every": 0})
    run = None
    try:
        run = wait_for(lambda: run_dir(tmp_path, "small"), 30, "the run directory", proc)
        wait_for(lambda: (run / "pids.json").exists(), 30, "agents", proc)
        victim = read_json(run, "pids.json")["pids"][0]
        wait_for(lambda: (run / "traffic.json").exists() and
                 read_json(run, "traffic.json")["by_kind"].get("push", {}).get("in_msgs", 0) > 10, 60, "pushes", proc)
        os.kill(victim, signal.SIGSTOP)        # frozen from outside: the PS never hears from it again
        out, _ = proc.communicate(timeout=90)
    finally:
        end_run(proc, run)
    summary = read_json(run, "summary.json")
    assert summary["status"] == "complete" and summary["updates"] == updates, out
    assert summary["devices"]["lost"] == 1 and summary["devices"]["crashed"] == 0
    events = read_table(run, "events")
    lost = events[events.event == "lost"]
    assert list(lost.device) == [0] and "silent for more than 3 s" in lost.detail.iloc[0]
    # The others kept training after device 0 went silent.
    table = read_table(run, "updates")
    assert (table[table.wall_time > lost.wall_time.iloc[0]].device != 0).sum() > 0
    assert json.loads((run / "summary.json").read_text())["reason"] == f"reached {updates} updates"
