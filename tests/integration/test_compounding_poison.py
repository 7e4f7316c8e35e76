"""Compounding poison against a real `edgebed run` (issue #36, 3): a hijacked device (no CURVE) pushes
0.9 × the value bound into one output bias after each pull. Before, the bound followed ‖Θ‖∞, Θ went
to ±Inf in seconds and the run failed blaming an honest device's NaN push; now the run ends
`failed: diverged`, exit 1, naming the poisoner, within a few of its pushes."""
from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from edgebed import wire
from edgebed.rundir import read_json
from tests.integration.runproc import end_run, run_dir, small_run, start_run, update_parts, wait_for

SCENARIO = small_run("poison", seed=3, train=1200, n=4, local=True, stop="{wall_time: 120s}", every=200,
                     test=200, classes="[{name: default, share: 0.75, think_time: 30ms}, "
                                       "{name: sleeper, share: 0.25, think_time: 900s}]")
POISONER, LR = 3, 0.05   # the sleeper's slot: it says hello again only at its next heartbeat


def _poison(endpoint: str, seconds: float) -> dict:
    """Hello as the sleeper, then pull / push 0.9 × 100 × max(1, ‖Θ‖∞) / α (the bound's formula before
    issue #36) into the last entry, halving it after a refusal; → what the poisoner saw."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)

    def ask(msg):
        sock.send_multipart(wire.encode(msg))
        return wire.decode(sock.recv_multipart()) if sock.poll(30_000) else None

    seen = {"applied": 0, "largest": 0.0, "stop": False, "busy": 0, "last": None}
    factor, seq, session = 0.9, 0, ask(wire.Hello(POISONER, "sleeper", 0)).session
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            m = ask(wire.Pull(session))
            if isinstance(m, wire.Error) and m.code == "busy":
                # The models sent for the refused pushes are still in ZeroMQ's hands (its free
                # callbacks lag on a loaded host): the PS sends no more until they are let go. Ask again.
                seen["busy"] += 1
                time.sleep(0.05)
                continue
            if not isinstance(m, wire.Model):
                seen["last"] = repr(m)[:200]
                seen["stop"] = isinstance(m, wire.Stop)
                break
            with np.errstate(over="ignore", invalid="ignore"):
                scale = float(np.max(np.abs(m.params)))
            seen["largest"] = max(seen["largest"], scale) if np.isfinite(scale) else float("inf")
            value = np.array([min(factor * 100 * max(1.0, scale) / LR, 3e38)], np.float32)
            r = ask(wire.Push(session, seq, m.version, value, np.array([m.params.size - 1], np.uint32), 0.5))
            seq += 1
            seen["applied"] += isinstance(r, wire.Ack) and r.applied
            factor /= 2 if isinstance(r, wire.Error) and r.code == "bad-payload" else 1
    finally:
        sock.close()
    return seen


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_compounding_poison_ends_the_run_failed_diverged_naming_the_poisoner(tmp_path):
    proc = start_run(tmp_path, SCENARIO)
    try:
        wait_for(lambda: update_parts(run_dir(tmp_path, "poison")) >= 1, 120, "the first updates", proc)
        run = run_dir(tmp_path, "poison")
        seen = _poison(read_json(run, "endpoint.json")["bind"], seconds=20)
        assert seen["stop"], f"the poisoner stopped before the run did: {seen}"
        out, _ = proc.communicate(timeout=90)
    finally:
        end_run(proc, run_dir(tmp_path, "poison"))
    s = read_json(run, "summary.json")
    assert proc.returncode == 1 and s["status"] == "failed", (s.get("reason"), out[-2000:])
    assert s["reason"].startswith("diverged:") and f"device {POISONER} moved it most" in s["reason"], s["reason"]
    assert seen["stop"] and seen["applied"] <= 3 and seen["largest"] < 1e3, seen
