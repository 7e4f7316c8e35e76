"""``python -m edgebed.device_agent``: without ``--attempt`` the agent takes the attempt number from the
environment (``run_agent`` reads EDGEBED_ATTEMPT when given None), so a container or exec-mode agent
started after a resume says hello with the resumed attempt; the old default 0 overrode it."""
from __future__ import annotations

import pytest

from edgebed.device_agent import __main__ as agent_main
from edgebed.device_agent import agent

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("argv, passed", [([], None), (["--attempt", "5"], 5)])
def test_attempt_is_left_to_the_environment_unless_given(monkeypatch, argv, passed):
    seen = {}
    monkeypatch.setattr(agent, "run_agent", lambda ps, device, attempt, timeout: seen.update(attempt=attempt) or 0)
    monkeypatch.setattr("zmq.Context.instance", lambda: type("C", (), {"term": lambda self: None})())
    assert agent_main.main(["--ps", "tcp://127.0.0.1:1", "--device", "0", *argv]) == 0
    assert seen == {"attempt": passed}
