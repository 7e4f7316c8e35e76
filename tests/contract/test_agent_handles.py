"""Contract of AgentHandle (mirrors subprocess.Popen): every handle class the engine can be given
behaves the same for poll / wait / freeze / terminate / kill.

Local processes, virtual devices and compose-started agents are real; the Spark handle runs over a
stage whose Spark job is replaced by an event (a real barrier stage needs a JVM: covered by
tests/system/test_spark_runtime.py). Docker's handles need containers: tests/system/test_docker_runtime.py."""
from __future__ import annotations

import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from edgebed.emulator.runtimes.base import AgentHandle

pytestmark = pytest.mark.timeout(30)


def _local():
    from edgebed.emulator.runtimes.local import ProcessHandle
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    return ProcessHandle(3, proc)


def _sim():
    from edgebed.emulator.runtimes.sim import SimHandle, _Device
    dev = _Device(3, {}, b"sim-3", None, None, np.random.default_rng(0), machine=None)
    return SimHandle(dev)


def _compose():
    from edgebed.emulator.runtimes.docker.compose import _ExternalHandle
    return _ExternalHandle(3)


def _spark():
    from edgebed.emulator.runtimes.spark.barrier import BarrierStage, SparkAgentHandle
    stage = BarrierStage.__new__(BarrierStage)   # the Spark job: cancelling it ends the stage

    class Job:
        def cancelJobGroup(self, group):
            stage.done.set()
    stage.sc, stage.group, stage.done, stage.results = Job(), "g", threading.Event(), {}
    stage.cancel_signal, stage.error = None, None
    return SparkAgentHandle(3, stage)


HANDLES = {"local": _local, "sim": _sim, "compose": _compose, "spark": _spark}


@pytest.fixture(params=sorted(HANDLES))
def handle(request):
    h = HANDLES[request.param]()
    yield h
    if h.poll() is None:
        h.kill()


def _ended(h: AgentHandle, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while h.poll() is None and time.monotonic() < deadline:
        h.wait(0.1)
    return h.poll()


def test_running_handle_has_no_exit_code(handle):
    assert isinstance(handle, AgentHandle) and handle.device == 3
    assert handle.poll() is None
    assert handle.wait(0.05) is None


def test_frozen_agent_is_still_running_and_can_be_killed(handle):
    handle.freeze()
    assert handle.poll() is None       # fail-stop: silent, not ended
    handle.kill()
    code = _ended(handle)
    assert code is not None and code != 0


def test_terminate_ends_with_the_signal(handle):
    handle.terminate()
    code = _ended(handle)
    assert code == -signal.SIGTERM
