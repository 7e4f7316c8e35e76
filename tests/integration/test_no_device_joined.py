"""A run in which no device said hello, or no update was applied, is not ``complete`` (issue 51, point 3).

Five docker runs under load ended ``complete``, exit 0, "wall time 60 s reached", with 0 updates and no
agent ever connected. Now such a run ends ``failed`` with the reason; on real-time runtimes the wall-time
limit counts from the first hello, and ``stop.first_hello_within`` bounds how long agents may take to
start; the summary records when the first hello came.
"""
from __future__ import annotations

import pytest

from edgebed.emulator.engine import Engine
from edgebed.emulator.runtimes.local import LocalRuntime
from edgebed.scenario import parse_scenario

pytestmark = pytest.mark.timeout(120)


def _scenario(runtime: str, stop: dict) -> dict:
    return {"name": "nojoin", "seed": 1, "dataset": {"train_samples": 300, "test_fraction": 0.1},
            "model": {"name": "mlp"}, "algorithm": {"name": "asgd", "lr": 0.05},
            "runtime": {"name": runtime}, "workers": {"n": 2}, "stop": stop,
            "eval": {"every": 50, "test_samples": 50}}


def test_a_run_where_no_device_ever_said_hello_ends_failed_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(LocalRuntime, "agent_endpoint", lambda self, bound: "tcp://127.0.0.1:9")   # no PS there
    sc = parse_scenario(_scenario("local", {"updates": 300, "wall_time": "2s", "first_hello_within": "3s"}))
    s = Engine(sc, tmp_path).run().summary
    assert (s["status"], s["updates"], s["devices"]["said_hello"]) == ("failed", 0, 0), s
    assert "no device said hello within 3 s" in s["reason"], s["reason"]
    assert s["startup"]["first_hello_s"] is None


def test_a_run_that_applied_no_update_ends_failed(tmp_path):
    """On the virtual clock every device says hello at once; a limit before the first push ends it."""
    sc = parse_scenario(_scenario("sim", {"wall_time": "1us"}))
    s = Engine(sc, tmp_path).run().summary
    assert (s["status"], s["updates"]) == ("failed", 0), s
    assert "no update was applied" in s["reason"] and "2 devices said hello" in s["reason"], s["reason"]


def test_wall_time_counts_from_the_first_hello_on_a_real_time_runtime(tmp_path):
    sc = parse_scenario(_scenario("local", {"updates": 100000, "wall_time": "3s"}))
    s = Engine(sc, tmp_path).run().summary
    assert s["status"] == "complete" and s["updates"] > 0, s
    first = s["startup"]["first_hello_s"]
    assert first is not None and first > 0
    assert s["wall_time_s"] >= first + 3.0 - 0.3, s   # the 3 s began at the first hello, not before
    assert s["startup"]["wall_time_from"].startswith("the first hello")
